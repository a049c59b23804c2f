"""Keys of encrypted arguments: PGQ_KEYS and encryption.keys_file refused by `check` (exit 2)
naming the entry and never the key; Secret refused before anything is written."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from supervisor import EnqueueError, Secret
from supervisor.queue import keyring as keys
from supervisor.queue import secrets as envelope
from supervisor.queue.enqueue import encode_args
from supervisor.queue.keyring import KeysError, new_key
from tests.commands import run_cli

CONFIG = """
handlers: {charge: "tests.secret_handlers:see"}
pools: {main: {queues: {default: 1}}}
jobs: {charge: {encrypt: [card]}}
%s
"""
SHORT = base64.urlsafe_b64encode(b"x" * 24).decode()
GOOD = new_key()


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (f"k1:{SHORT}", "line 1 (key id 'k1'): the key is 24 bytes; keys are 32"),
        ("k1:not*base64", "line 1 (key id 'k1'): the key is not urlsafe base64"),
        (f"# old\nk1:{GOOD}\n\nk1:{GOOD}", "line 4: key id 'k1' appears twice"),
        (GOOD, "line 1: must be ID:KEY"),
        ("", "no keys"),
    ],
)
def test_check_refuses_a_bad_keys_file_naming_the_key_path_and_not_the_key(
    tmp_path: Path, lines: str, expected: str
) -> None:
    (tmp_path / "keys").write_text(lines)
    config = tmp_path / "pgq.yaml"
    config.write_text(CONFIG % "encryption: {keys_file: keys}")
    env = {k: v for k, v in os.environ.items() if k != "PGQ_KEYS"}
    done = run_cli(config, "check", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "encryption.keys_file" in done.stderr and expected in done.stderr, done.stderr
    assert str(tmp_path / "keys") in done.stderr
    for secret in (SHORT, GOOD, "not*base64"):
        assert secret not in done.stderr + done.stdout


def test_check_refuses_a_bad_pgq_keys_and_accepts_good_keys(tmp_path: Path) -> None:
    config = tmp_path / "pgq.yaml"
    config.write_text(CONFIG % "")
    env = {**os.environ, "PGQ_KEYS": f"k2:{GOOD},k1:{SHORT}"}
    done = run_cli(config, "check", env=env)
    assert done.returncode == 2
    assert "PGQ_KEYS: entry 2 (key id 'k1'): the key is 24 bytes" in done.stderr
    assert GOOD not in done.stderr and SHORT not in done.stderr
    assert run_cli(config, "check", env={**env, "PGQ_KEYS": f"k2:{GOOD}"}).returncode == 0
    (tmp_path / "keys").write_text(f"k3:{new_key()}\nk2:{GOOD}\n")
    config.write_text(CONFIG % "encryption: {keys_file: keys}")
    assert run_cli(config, "check", env=env).returncode == 0, "the file wins over PGQ_KEYS"


def test_a_secret_without_keys_or_with_a_bad_value_is_refused_before_writing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGQ_KEYS", raising=False)
    with pytest.raises(EnqueueError, match=r"job 'charge': a Secret argument needs keys"):
        encode_args("charge", {"card": Secret("4111")})
    monkeypatch.setenv("PGQ_KEYS", f"k1:{SHORT}")
    with pytest.raises(EnqueueError, match=r"PGQ_KEYS: entry 1 \(key id 'k1'\)") as bad:
        encode_args("charge", {"card": Secret("4111")})
    assert SHORT not in str(bad.value)
    monkeypatch.setenv("PGQ_KEYS", f"k1:{GOOD}")
    with pytest.raises(EnqueueError, match="not JSON-serialisable"):
        encode_args("charge", {"card": Secret(object())})
    with pytest.raises(TypeError, match="sealed once"):
        Secret(Secret(1))
    assert repr(Secret("4111")) == "Secret(...)"
    # Args without a Secret are unchanged (the encoder's default is never called for them).
    assert encode_args("charge", {"a": [1, "x"]}) == '{"a":[1,"x"]}'


def test_envelopes_open_only_for_their_kind_and_key_and_show_as_their_key_id() -> None:
    ring = keys.from_text(f"k2:{new_key()},k1:{GOOD}")
    sealed = envelope.seal({"n": "4111"}, "charge", ring)
    assert sealed[envelope.MARK]["key"] == "k2" and "4111" not in str(sealed)
    assert envelope.open_args({"c": sealed}, "charge", ring) == {"c": {"n": "4111"}}
    with pytest.raises(envelope.Unopenable, match="fails authentication for kind 'refund'"):
        envelope.open_args({"c": sealed}, "refund", ring)
    with pytest.raises(envelope.Unopenable, match="key 'k2', which this process lacks") as lack:
        envelope.open_args({"c": sealed}, "charge", keys.from_text(f"k1:{GOOD}"))
    assert lack.value.key_id == "k2"
    text = sealed[envelope.MARK]["ct"]
    flipped = ("B" if text[0] == "A" else "A") + text[1:]
    tampered = {envelope.MARK: {**sealed[envelope.MARK], "ct": flipped}}
    with pytest.raises(envelope.Unopenable, match="fails authentication"):
        envelope.open_args(tampered, "charge", ring)
    assert envelope.mask({"c": sealed, "l": [sealed], "x": 1}) == {
        "c": "[encrypted: key k2]",
        "l": ["[encrypted: key k2]"],
        "x": 1,
    }
    assert envelope.in_clear({"card": "4111", "other": 1}, ("card", "pin")) == ["card"]
    assert envelope.in_clear({"card": sealed}, ("card",)) == []
    assert GOOD not in repr(ring) and "k1" in repr(ring)


def test_keys_parse_errors_name_the_entry() -> None:
    with pytest.raises(KeysError, match=r"PGQ_KEYS: entry 1: the key id must be"):
        keys.from_text(f"bad id:{GOOD}")
    with pytest.raises(KeysError, match="cannot read the keys file"):
        keys.from_file("/nonexistent/keys")


def test_run_inline_passes_a_secrets_value_through() -> None:
    from supervisor.testing import run_inline

    seen: list[object] = []
    run_inline(lambda card, n: seen.append((card, n)), {"card": Secret("4111"), "n": [Secret(1)]})
    assert seen == [("4111", [1])]


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ('jobs: {charge: {encrypt: [""]}}', "jobs.charge.encrypt"),
        ("encryption: {keys_file: keys, keys: x}", "encryption.keys: unknown key"),
        ("encryption: {keys_file: missing}", "cannot read the keys file"),
    ],
)
def test_check_refuses_a_bad_encryption_section(
    tmp_path: Path, section: str, expected: str
) -> None:
    (tmp_path / "keys").write_text(f"k1:{GOOD}\n")
    config = tmp_path / "pgq.yaml"
    config.write_text(
        'handlers: {charge: "tests.secret_handlers:see"}\n'
        "pools: {main: {queues: {default: 1}}}\n" + section + "\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PGQ_KEYS"}
    done = run_cli(config, "check", env=env)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert GOOD not in done.stderr
