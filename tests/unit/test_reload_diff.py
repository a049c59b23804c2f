"""A reload's words and its weight-only path: what changed, said plainly, and the board that
carries new weights to running children."""

from __future__ import annotations

from dataclasses import replace

from supervisor.config import PoolConfig
from supervisor.master.reload_diff import pool_changes, weights_only
from supervisor.shared.board import Board

MEDIA = PoolConfig("media", {"media": 1, "thumbs": 2}, processes=2)


def test_weights_only_and_what_changed() -> None:
    heavier = replace(MEDIA, queues={"media": 3, "thumbs": 2})
    assert weights_only(MEDIA, heavier)
    assert pool_changes(MEDIA, heavier) == ["queue media weight 1 -> 3"]
    more = replace(heavier, processes=4)
    assert not weights_only(MEDIA, more)
    assert pool_changes(MEDIA, more) == ["processes 2 -> 4", "queue media weight 1 -> 3"]
    added = replace(MEDIA, queues={"media": 1, "thumbs": 2, "video": 1})
    assert not weights_only(MEDIA, added)
    assert pool_changes(MEDIA, added) == ["queue video added (weight 1)"]
    assert pool_changes(MEDIA, replace(MEDIA, queues={"media": 1})) == ["queue thumbs removed"]
    assert not weights_only(MEDIA, MEDIA)


def test_the_board_carries_weights_by_generation() -> None:
    board = Board(1, unrecorded=2, queues=2)
    assert board.weights_generation() == 0
    board.set_weights([3, 2])
    assert board.weights_generation() == 1 and board.weights() == [3, 2]
    board.set_weights([5, 1])
    assert board.weights_generation() == 2 and board.weights() == [5, 1]
    assert Board(1).weights_generation() == 0  # a board without queues never changes
