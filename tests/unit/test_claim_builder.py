"""The claim statement as composed from sql/claim/'s pieces (supervisor.queue.claim_builder)."""

from __future__ import annotations

import pytest

from supervisor.queue import claim_builder
from supervisor.queue.queries import query


def test_the_claims_the_child_sends_are_the_builders() -> None:
    for name in claim_builder.VARIANTS:
        assert query(name) == claim_builder.statement(name)


def test_every_piece_is_used_and_every_slot_filled() -> None:
    for name in claim_builder.VARIANTS:
        text = claim_builder.statement(name)
        assert "{" not in text and "}" not in text, name
    unused = [name for name in claim_builder.pieces() if name not in _used()]
    assert not unused, f"pieces of sql/claim/ no statement uses: {unused}"


def _used() -> set[str]:
    """The pieces the variants' compositions reach, read back from piece()'s look-ups."""
    seen: set[str] = set()
    original = claim_builder.piece

    def spy(name: str, **values: str) -> str:
        seen.add(name)
        return original(name, **values)

    claim_builder.statement.cache_clear()
    try:
        claim_builder.piece = spy  # type: ignore[assignment]
        for name in claim_builder.VARIANTS:
            claim_builder.statement(name)
    finally:
        claim_builder.piece = original  # type: ignore[assignment]
        claim_builder.statement.cache_clear()
    return seen


def test_a_slot_filled_with_no_such_piece_names_it() -> None:
    with pytest.raises(KeyError, match="no piece named 'nowhere'"):
        claim_builder.piece("nowhere")
    with pytest.raises(ValueError, match="has no slot"):
        claim_builder.piece("token", take="1")


def test_the_variants_are_shorter_and_an_unknown_one_is_refused() -> None:
    whole = len(claim_builder.statement("claim"))
    assert all(
        len(claim_builder.statement(n)) < whole for n in claim_builder.VARIANTS if n != "claim"
    )
    with pytest.raises(ValueError, match="no claim variant 'claim_fast'"):
        claim_builder.statement("claim_fast")
