"""`pgq-supervisor -c FILE doctor [--json]`: what holds the database back, and the fix.

Exit 0 when every check passes, 1 when one warns or fails (supervisor/doctor/).
"""

from __future__ import annotations

import argparse
import json

from supervisor.cli.session import json_argument, session
from supervisor.cli.verbs import Context, verb
from supervisor.queue.dsn import describe
from supervisor.shared.exits import MasterExit


def doctor_arguments(parser: argparse.ArgumentParser) -> None:
    json_argument(parser)


@verb(
    "doctor",
    "check what holds the database back (xmin horizon, vacuum, the claim's plan, pressure, "
    "headroom), name the culprit and the fix; exit 0 when all pass, 1 otherwise",
    doctor_arguments,
)
def doctor(ctx: Context) -> int:
    from supervisor.doctor import render
    from supervisor.doctor.checks import diagnose

    with session(ctx, autocommit=True) as conn:
        checks = diagnose(conn, ctx.config)
        database = describe(conn.info.dsn)
    if ctx.args.json:
        print(json.dumps(render.to_json(checks), indent=2, ensure_ascii=False))
    else:
        print("\n".join(render.render(checks, database)))
    return MasterExit.OK if all(c.passed for c in checks) else MasterExit.ERROR
