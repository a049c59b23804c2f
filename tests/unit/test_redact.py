"""The redaction tools every surface uses (supervisor/shared/redact.py)."""

from __future__ import annotations

from supervisor.shared.redact import REDACTED, redact, refused_search, scrub, scrub_errors

ARGS = {"order": 7, "card": {"Number": "4111 1111", "cvv": 737}, "tags": [{"pin": "4821"}]}
KEYS = ("number", "CVV", "pin")


def test_redact_replaces_named_keys_at_every_depth_without_regard_to_case() -> None:
    assert redact(ARGS, KEYS) == {
        "order": 7,
        "card": {"Number": REDACTED, "cvv": REDACTED},
        "tags": [{"pin": REDACTED}],
    }
    assert redact(ARGS, ()) is ARGS


def test_scrub_takes_the_redacted_values_out_of_free_text() -> None:
    text = "ValueError: card 4111 1111 (cvv 737) declined, pin 4821; order 7"
    assert scrub(text, ARGS, KEYS) == (
        f"ValueError: card {REDACTED} (cvv {REDACTED}) declined, pin {REDACTED}; order 7"
    )
    assert scrub(None, ARGS, KEYS) is None
    # A value too short to search for in free text is left (it would garble the message).
    assert scrub("attempt 1 of 5", {"pin": "1"}, KEYS) == "attempt 1 of 5"
    kept = [{"seq": 1, "error": "pin 4821 refused"}]
    assert scrub_errors(kept, ARGS, KEYS) == [{"seq": 1, "error": f"pin {REDACTED} refused"}]


def test_a_search_naming_a_redacted_key_anywhere_is_named() -> None:
    assert refused_search({"pin": "4821"}, KEYS) == ["pin"]
    assert refused_search({"card": {"NUMBER": "4"}, "order": 7}, KEYS) == ["NUMBER"]
    assert refused_search({"tags": [{"pin": "1"}]}, KEYS) == ["pin"]
    assert refused_search({"order": 7, "card": {"holder": "Ann"}}, KEYS) == []
    assert refused_search(None, KEYS) == []
