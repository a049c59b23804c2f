"""`keys rotate|status|new`: the keys of encrypted arguments (docs/how-to/encrypted-arguments.md).

The keys come from the config's ``encryption.keys_file``, else PGQ_KEYS; the first seals. No
output shows a key, except ``keys new``, whose whole purpose is to print a fresh one.
"""

from __future__ import annotations

import argparse
import json
import sys

from supervisor.cli.session import json_argument, positive_int, session
from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.config.encryption import ring
from supervisor.crypto.rotate import Rotation, envelopes_by_key, rotate
from supervisor.queue import keyring as keys_mod
from supervisor.queue.keyring import KeysError
from supervisor.shared.exits import MasterExit


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be seconds, got {text!r}") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be 0 to 60 seconds, got {value:g}")
    return value


def keys_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "rotate",
        help="re-seal every envelope under the first key, in slices (resumable, idempotent)",
    )
    p.add_argument("--slice", type=positive_int, default=1000, help="rows read per slice")
    p.add_argument(
        "--pause", type=_seconds, default=0.0, help="seconds between slices (a busy database)"
    )
    json_argument(p)
    p = sub.add_parser("status", help="envelopes per key id (what rotation has left)")
    json_argument(p)
    p = sub.add_parser("new", help="print a new ID:KEY line (32 random bytes)")
    p.add_argument("id", nargs="?", default=None, metavar="ID", help="the key id (default k1)")


@verb("keys", "keys of encrypted arguments: rotate, status, new", keys_arguments)
def keys_verb(ctx: Context) -> int:
    try:
        return _keys(ctx)
    except KeysError as exc:  # never the key itself: the messages name the entry
        raise UsageError(str(exc)) from None


def _keys(ctx: Context) -> int:
    command = ctx.args.keys_command
    if command == "new":
        key_id = ctx.args.id or "k1"
        keys_mod.parse([("the key id", f"{key_id}:{keys_mod.new_key()}")], "keys new")
        print(f"{key_id}:{keys_mod.new_key()}")
        return MasterExit.OK
    found = ring(ctx.config.encryption)
    if found is None:
        raise UsageError(
            f"no keys: set {keys_mod.ENV}=ID:KEY,... or encryption.keys_file in {ctx.config.path}"
        )
    if command == "status":
        with session(ctx, snapshot=True) as conn, conn.transaction():
            counts = envelopes_by_key(conn)
        unknown = sorted(set(counts) - set(found.ids()))
        if ctx.args.json:
            print(json.dumps({"current": found.current, "envelopes": counts, "missing": unknown}))
            return MasterExit.OK
        print(f"sealing key: {found.current} (from {found.source})")
        for key_id, n in counts.items():
            mark = "" if key_id in found.ids() else "   (not in these keys: cannot be opened)"
            print(f"  {key_id:<20} {n:>10} envelopes{mark}")
        if not counts:
            print("  no envelopes")
        return MasterExit.OK
    with session(ctx, autocommit=True) as conn:

        def report(done: Rotation) -> None:
            if not ctx.args.json and done.slices % 50 == 0:
                print(f"  {done.slices} slices, {done.rows} rows re-sealed", file=sys.stderr)

        done = rotate(conn, found, scan=ctx.args.slice, pause=ctx.args.pause, progress=report)
    if ctx.args.json:
        print(json.dumps(done.as_dict()))
    else:
        print(
            f"re-sealed {done.envelopes} envelopes in {done.rows} rows under key {done.key} "
            f"({done.slices} slices)"
        )
        for problem in done.unopenable:
            print(f"  not rotated: {problem}")
        if done.skipped:
            print(f"  {done.skipped} rows changed meanwhile: run keys rotate again")
    return MasterExit.ERROR if done.unopenable or done.skipped else MasterExit.OK
