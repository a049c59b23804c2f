"""The redaction tools every surface uses (supervisor/shared/redact.py)."""

from __future__ import annotations

from types import SimpleNamespace

from supervisor.crypto.search import protected_keys, search_problem
from supervisor.shared.redact import REDACTED, redact, scrub, scrub_errors

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
    config = SimpleNamespace(web=SimpleNamespace(redact=KEYS), encrypted_fields=dict)
    protected = protected_keys(config)

    def named(search: object) -> str | None:
        problem = search_problem(search, protected)  # type: ignore[arg-type]
        return problem and problem.split("'")[1]

    assert named({"pin": "4821"}) == "pin"
    assert named({"card": {"NUMBER": "4"}, "order": 7}) == "NUMBER"
    assert named({"tags": [{"pin": "1"}]}) == "pin"
    assert named({"order": 7, "card": {"holder": "Ann"}}) is None
    assert named(None) is None
    assert "web.redact" in (search_problem({"pin": "1"}, protected) or "")
