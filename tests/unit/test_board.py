"""The status board: what a child writes is what the master reads; a closed board is unreadable
(so the master must drop every reference to a reaped child's board)."""

import pytest

from supervisor.shared.board import Board, Counter, State


def test_what_the_child_writes_the_master_reads() -> None:
    board = Board(threads=2)
    board.set_state(State.RUNNING)
    board.set_ready()
    board.count(Counter.COMPLETED, 3)
    board.observe_claim(0.0007)
    board.observe_job(2.0)
    board.job_started(1, 42, 7, 0, 10.0)
    assert board.state == State.RUNNING and board.ready
    assert board.counter(Counter.COMPLETED) == 3
    buckets, total = board.claim_histogram()
    assert sum(buckets) == 1 and total == pytest.approx(0.0007)
    (job,) = board.running_jobs()
    assert (job.thread, job.job_id, job.lease_id, job.kind_index) == (1, 42, 7, 0)
    assert job.deadline is not None and job.deadline - job.started == pytest.approx(10.0)
    board.job_finished(1)
    assert board.running_jobs() == []
    board.close()
    with pytest.raises(ValueError):
        _ = board.ready


def test_jobs_run_but_not_recorded_are_listed_within_their_room() -> None:
    board = Board(threads=2, unrecorded=3)
    assert board.unrecorded() == []
    board.set_unrecorded([11, 12])
    assert board.unrecorded() == [11, 12]
    board.set_unrecorded([1, 2, 3, 4])  # more than the room: the first three are listed
    assert board.unrecorded() == [1, 2, 3]
    board.job_started(1, 42, 7, 0, None)  # the thread records beside it are untouched
    board.set_unrecorded([])
    assert board.unrecorded() == [] and [j.job_id for j in board.running_jobs()] == [42]
    board.close()


def test_each_cancel_has_a_word_of_its_own() -> None:
    """Two jobs cancelled in the same second are both on the board; when every word is taken,
    the oldest cancel gives way."""
    from supervisor.shared.board import CANCEL_SLOTS

    board = Board(1)
    board.cancel_job(11)
    board.cancel_job(12)
    board.cancel_job(11)  # asked again at the master's next look: still one word
    assert board.cancelled_jobs() == {11, 12}
    for job_id in range(100, 100 + CANCEL_SLOTS):
        board.cancel_job(job_id)
    assert len(board.cancelled_jobs()) == CANCEL_SLOTS
    assert 11 not in board.cancelled_jobs()
    assert 100 + CANCEL_SLOTS - 1 in board.cancelled_jobs()


def test_the_claims_held_round_trip_and_say_when_they_do_not_fit() -> None:
    """The master renews what a child shows here (services/leases.py); a list that does not
    fit says so, and the master renews that child by worker identity instead."""
    board = Board(threads=1, unrecorded=2, held=3)
    assert board.held() == []  # nothing published yet: nothing held
    board.set_held([(11, 101), (12, 102)])
    assert board.held() == [(11, 101), (12, 102)]
    board.set_held([(n, n) for n in range(4)])
    assert board.held() is None
    board.set_held([])
    assert board.held() == []
    board.close()
