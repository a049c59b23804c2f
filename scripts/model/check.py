"""Model-check the claim protocol (scripts/model/protocol.pml) with spin, and prove that each
broken variant still fails.

Each scenario turns on the faults its invariants are about and is checked exhaustively (spin's
safety search, no partial order tricks beyond its default reduction); each broken variant, one
defect an earlier round fixed, must produce a counterexample in the scenario that exposes it,
and the assertion it breaks must be the expected one. Prints one JSON object per check and a
summary; exits 1 when a clean scenario fails or a broken variant passes.

    python scripts/model/check.py            # everything (about a minute on this machine)
    python scripts/model/check.py --only fence --keep /tmp/trails
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).with_name("protocol.pml")
#: The memory one check may take (MB): over it, pan stops, and the check counts as failed.
MEMORY_LIMIT_MB = 1536


@dataclass(frozen=True)
class Scenario:
    name: str
    defines: tuple[str, ...]
    about: str


@dataclass(frozen=True)
class Broken:
    define: str
    scenario: str
    #: A piece of the assertion the counterexample must break.
    breaks: str
    about: str


SCENARIOS = (
    Scenario(
        "fence",
        ("CRASHES=1", "PARTITIONS=1", "DEADLINES=1"),
        "claims, the fence, leases across a partition, a dead child's requeue, a give-back at "
        "the shutdown deadline racing the child's last write",
    ),
    Scenario(
        "reply",
        ("LOST_REPLIES=1", "CUTS=1", "CRASHES=1"),
        "a claim whose reply is lost with the connection, a lease question on a cut session",
    ),
    Scenario(
        "outcome",
        ("KEY_RETRY", "CRASHES=1", "RETRY_RESOLUTIONS=1"),
        "outcome unknown: an external job's dead child, the reconciler, a unique key's retry",
    ),
    Scenario(
        "outcome-partition",
        ("KEY_RETRY", "PARTITIONS=1"),
        "outcome unknown through a rescue: an external job's lease lost across a partition",
    ),
    Scenario(
        "batch",
        ("BATCH", "CRASHES=1", "CANCELS=1"),
        "a batch's then job, its members ending by completion, discard, requeue and cancel",
    ),
    Scenario(
        "batch-partition",
        ("BATCH", "PARTITIONS=1"),
        "a batch's then job with a member rescued",
    ),
    Scenario(
        "control",
        ("CANCELS=1", "REPLAYS=1"),
        "cancel requests, dead letters replayed",
    ),
    Scenario("cursor", (), "claim cursors, late commits below them, retries"),
)

BROKEN = (
    Broken("BROKEN_NO_FENCE", "fence", "owner[j]==me", "a completion matched on the id alone"),
    Broken(
        "BROKEN_ATTEMPT_FENCE",
        "fence",
        "owner[j]==me",
        "the attempt number as the fence, which a give-back decrements (ABA)",
    ),
    Broken(
        "BROKEN_RENEWAL_STARVED",
        "fence",
        "partitioned",
        "lease renewal timed out under a held xmin horizon (issue 30)",
    ),
    Broken(
        "BROKEN_NO_GIVEBACK",
        "reply",
        "state[j]!=RUNNING",
        "a claim whose reply was lost never given back on reconnect",
    ),
    Broken(
        "BROKEN_CUT_IS_LOST",
        "reply",
        "runs[j]<=",
        "a lease question on a cut session read as a lost lease",
    ),
    Broken(
        "BROKEN_UNKNOWN_REQUEUE",
        "outcome",
        "runs[j]<=",
        "a dead child's external job requeued instead of held unknown",
    ),
    Broken(
        "BROKEN_UNKNOWN_FREES_KEY",
        "outcome",
        "key_was_unknown",
        "the unique key given up by an unknown job (issue 30)",
    ),
    Broken(
        "BROKEN_SNAPSHOT_COUNT",
        "batch",
        "thens==1",
        "the batch's last member found by a snapshot read of the counters",
    ),
    Broken(
        "BROKEN_REPLAY_KEEPS_CANCEL",
        "control",
        "asked_cancel[j]",
        "a replayed dead letter kept its old cancel request",
    ),
    Broken(
        "BROKEN_NO_HEAD_CLAIM",
        "cursor",
        "state[j]!=AVAIL",
        "claims only past the cursor: a late commit below it never claimed",
    ),
)

_ERRORS = re.compile(r"errors:\s+(\d+)")
_STATES = re.compile(r"([\d.e+]+) states, stored")
_FAILED = re.compile(r"text of failed assertion: (.*)")


def spin_available() -> bool:
    return shutil.which("spin") is not None and shutil.which("gcc") is not None


def check(
    defines: tuple[str, ...], workdir: Path, keep: Path | None, label: str, *, shortest: bool
) -> dict:
    """Build and run pan for one set of defines; returns what it found. ``shortest`` searches
    breadth first, for a broken variant: its counterexample is then the shortest one, found
    long before a depth-first search would reach it."""
    flags = [f"-D{d}" for d in defines]
    run_dir = workdir / label
    run_dir.mkdir()
    shutil.copy(MODEL, run_dir / MODEL.name)
    started = time.monotonic()
    subprocess.run(["spin", "-a", *flags, MODEL.name], cwd=run_dir, check=True, capture_output=True)
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-DSAFETY",
            "-DBFS" if shortest else "-DCOLLAPSE",
            f"-DMEMLIM={MEMORY_LIMIT_MB}",
            "-o",
            "pan",
            "pan.c",
        ],
        cwd=run_dir,
        check=True,
        capture_output=True,
    )
    pan = subprocess.run(
        ["./pan", "-m100000"], cwd=run_dir, capture_output=True, text=True, check=False
    )
    out = pan.stdout + pan.stderr
    errors = int(m.group(1)) if (m := _ERRORS.search(out)) else -1
    states = float(m.group(1)) if (m := _STATES.search(out)) else 0.0
    result: dict = {
        "check": label,
        "defines": list(defines),
        "errors": errors,
        "states": int(states),
        "seconds": round(time.monotonic() - started, 2),
        "out_of_memory": "MEMLIM" in out or "out of memory" in out,
    }
    if errors > 0:
        trail = subprocess.run(
            ["spin", "-t", *flags, "-p", MODEL.name],
            cwd=run_dir,
            capture_output=True,
            text=True,
            check=False,
        )
        failed = _FAILED.search(trail.stdout + trail.stderr)
        result["failed_assertion"] = failed.group(1).strip() if failed else None
        result["trail_steps"] = sum(1 for line in trail.stdout.splitlines() if "proc " in line)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{label}.trail.txt").write_text(trail.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="a scenario's name (repeatable)")
    parser.add_argument("--keep", type=Path, help="write the counterexamples' trails here")
    parser.add_argument("--jobs", type=int, default=2, help="checks run at once (default 2)")
    args = parser.parse_args(argv)
    if not spin_available():
        print("spin and gcc are needed: apt-get install spin gcc", file=sys.stderr)
        return 2
    wanted = set(args.only or [s.name for s in SCENARIOS])
    unknown = wanted - {s.name for s in SCENARIOS}
    if unknown:
        print(f"unknown scenario(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    by_name = {s.name: s for s in SCENARIOS}
    runs: list[tuple[str, tuple[str, ...], Broken | None]] = [
        (s.name, s.defines, None) for s in SCENARIOS if s.name in wanted
    ]
    runs += [
        (b.define.lower(), (*by_name[b.scenario].defines, b.define), b)
        for b in BROKEN
        if b.scenario in wanted
    ]
    verdicts = []
    with (
        tempfile.TemporaryDirectory(prefix="pgq-model-") as tmp,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        work = Path(tmp)
        futures = [
            pool.submit(check, defines, work, args.keep, label, shortest=broken is not None)
            for label, defines, broken in runs
        ]
        for (_, _, broken), future in zip(runs, futures, strict=True):
            result = future.result()
            if broken is None:
                result["kind"] = "clean"
                result["ok"] = result["errors"] == 0 and not result["out_of_memory"]
            else:
                failed = result.get("failed_assertion") or ""
                result["kind"] = "broken"
                result["expected"] = broken.breaks
                result["ok"] = result["errors"] > 0 and broken.breaks in failed.replace(" ", "")
            verdicts.append(result)
            print(json.dumps(result), flush=True)
    bad = [v["check"] for v in verdicts if not v["ok"]]
    summary = {
        "summary": {
            "checks": len(verdicts),
            "ok": len(verdicts) - len(bad),
            "failed": bad,
            "states": sum(v["states"] for v in verdicts),
            "seconds": round(sum(v["seconds"] for v in verdicts), 1),
        }
    }
    print(json.dumps(summary))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
