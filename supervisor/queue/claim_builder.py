"""The claim statement, composed from its named pieces in sql/claim/.

A worker's round trip is one statement (one transaction, one commit): delete the jobs it
finished since its last claim, then claim the next batch across its pool's queues. Its steps,
each a named piece in a file of sql/claim/ (docs/claim-order.md says what each costs):

  completions.sql  done, recorded, spent the finished jobs carried, deleted and recorded, and
                                        what their attempts cost
  token.sql        token                 one fencing token for the batch
  allowances.sql   allowance, ...        what the queues' limits allow, the caps, held_back
  walk.sql         walk, probe, cursor   the tenants visited, one index probe each
  quota.sql        quota                 each tenant's share of the batch
  pick.sql         next, passes, pick    each tenant's best due jobs, locked
  aging.sql        aged_pick             the same in a queue that ages: by effective priority
  order.sql        claim_order, ...      the claim order and its two halves, written once
  reply.sql        claimed, reply        the jobs marked running, the row of what was completed
  flat.sql         flat_next, ...        the flat claim's next: no walk, the queue's jobs in order

A piece names the pieces it contains as ``{name}``; the builder fills a slot with the piece of
that name, or with a value it passes for that one use (the columns a half of the order returns,
the LIMIT a pass takes). What the server receives is the text ``statement`` returns: still with
``%(name)s`` placeholders, which ``queries.native_text`` turns into ``$n``.
"""

from __future__ import annotations

import re
from functools import cache

from supervisor.queue.sql_files import native_text, parse, sql_dir

_SLOT = re.compile(r"\{(?P<name>[a-z_]+)\}")


@cache
def pieces() -> dict[str, str]:
    """Every named piece of sql/claim/, by name (a name is defined once across the files)."""
    found: dict[str, str] = {}
    for path in sorted((sql_dir() / "claim").glob("*.sql")):
        named = parse(path.read_text(encoding="utf-8"), f"sql/claim/{path.name}")
        twice = sorted(set(named) & set(found))
        if twice:
            raise ValueError(f"sql/claim/{path.name}: pieces {twice} are defined twice")
        found.update(named)
    return found


def piece(name: str, **values: str) -> str:
    """The piece ``name`` with its slots filled: a slot named in ``values`` by that value, any
    other by the piece of its name (itself filled the same way, without ``values``)."""
    try:
        text = pieces()[name]
    except KeyError:
        raise KeyError(f"sql/claim/: no piece named {name!r}") from None
    unused = sorted(set(values) - set(m["name"] for m in _SLOT.finditer(text)))
    if unused:
        raise ValueError(f"sql/claim/ piece {name!r} has no slot {unused}")

    def fill(match: re.Match[str]) -> str:
        slot = match["name"]
        filling = values[slot] if slot in values else piece(slot)
        # Continuation lines indented so that the statement still reads as SQL in
        # pg_stat_activity and EXPLAIN: a statement under its slot's column, a fragment inside
        # a line (a condition, a clause) under that line's indentation.
        line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        inside = line.strip() and not line.rstrip().endswith("(")
        column = len(line) - len(line.lstrip()) if inside else len(line)
        return filling.replace("\n", "\n" + " " * column)

    return _SLOT.sub(fill, text)


def _cte(names_and_bodies: list[tuple[str, str]], reply: str) -> str:
    parts = [
        f"{name} AS (\n    " + body.replace("\n", "\n    ") + "\n)"
        for name, body in names_and_bodies
    ]
    return "WITH " + ",\n".join(parts) + "\n" + reply


def _past_cursor() -> dict[str, str]:
    """The walk's probe of a cursor's tenant: order.sql's two halves after the cursor's key."""
    common = {
        "guard": "k.tenant IS NOT NULL\n  AND ",
        "in_tenant": "\n" + piece("in_tenant", tenant="k.tenant"),
        "priority": "k.priority",
        "due": "",
        "take": "1",
        "lock": "",
    }
    return {
        "past_cursor_same": piece(
            "same_priority",
            columns="j.priority::integer AS kp, j.run_at AS kr, j.id AS ki",
            past=">",
            run_at="k.run_at",
            id="k.id",
            **common,
        ),
        "past_cursor_lower": piece(
            "lower_priorities", columns="j.priority, j.run_at, j.id", **common
        ),
    }


def _pick(take: str, aging: bool) -> str:
    """A pass's pick of tenant v: order.sql's two halves from the walk's key, due, locked."""
    common = {
        "columns": "j.id",
        "guard": "",
        "in_tenant": "\n" + piece("in_tenant", tenant="v.tenant"),
        "priority": "v.kp",
        "due": "\nAND j.run_at <= now()",
        "take": take,
        "lock": "\nFOR UPDATE SKIP LOCKED",
    }
    plain = piece(
        "pick",
        same=piece("same_priority", past=">=", run_at="v.kr", id="v.ki", **common),
        lower=piece("lower_priorities", **common),
    )
    if not aging:
        return plain
    # A queue that ages its jobs (aging.sql) picks by effective priority instead.
    return piece("pick_or_aged", plain=plain, aged=piece("aged_pick", take=take))


def _next(limits: bool, second_pass: bool, aging: bool) -> str:
    walk = piece(
        "walk",
        probe=piece("probe", **_past_cursor()),
        queue_allowance=piece("queue_allowance" if limits else "no_limits"),
        tenant_room=piece("tenant_room" if limits else "unlimited_room"),
    )
    first = piece("first_pass", pick_jobs=_pick("v.jobs", aging))
    # A batch of one: the first pass alone (see ``variant``).
    if second_pass:
        passes = piece("passes", first_pass=first, pick_room=_pick("v.room", aging))
    else:
        passes = first
    if limits:  # numbered for the caps
        return piece("next", walk=walk, passes=piece("numbered", passes=passes), nth=", pick.nth")
    return piece("next", walk=walk, passes=passes, nth="")


def _flat_next(past_cursor: bool) -> str:
    """The flat claim's next (flat.sql): order.sql's two halves from the queue's key (past the
    child's cursor for its tenant '', else the head), of every tenant, due, locked; without
    ``past_cursor``, the second half alone, below every priority (from the head)."""
    common = {
        "columns": "j.id",
        "guard": "",
        "in_tenant": "",
        "priority": "k.priority",
        "due": "\nAND j.run_at <= now()",
        "take": "%(limit)s",
        "lock": "\nFOR UPDATE SKIP LOCKED",
    }
    if not past_cursor:
        # The whole queue in claim order (a smallint's priorities are at most 32767), only
        # while it is open (flat_open).
        guard = piece("flat_open").replace("\n", "\n  ") + "\n  AND "
        head = piece("lower_priorities", **{**common, "priority": "32768", "guard": guard})
        return piece("flat_next", flat_pick=head)
    pick = piece(
        "pick",
        same=piece("same_priority", past=">", run_at="k.run_at", id="k.id", **common),
        lower=piece("lower_priorities", **common),
    )
    return piece("flat_next", flat_pick=piece("flat_past_cursor", pick=pick))


def _name(limits: bool, second_pass: bool, aging: bool) -> str:
    return (
        ("claim" if second_pass else "claim_one")
        + ("" if limits else "_unlimited")
        + ("" if aging else "_unaged")
    )


# The claim without the tenant walk (flat.sql), for any batch: without limits and aging only;
# past the child's cursors, and from the head (a claim sent without cursors).
FLAT = "claim_flat_unlimited_unaged"
FLAT_HEAD = "claim_flat_head_unlimited_unaged"
# The claim from the head when it carries no completions (an idle child's after a wake-up):
# without `done`, `recorded` and the reply's side effects (reply.sql, carried).
FLAT_HEAD_FRESH = "claim_flat_head_unlimited_unaged_fresh"
# A carrying variant of a child that keeps no history: without `recorded` and `spent`
# (completions.sql), whose nodes cost each of its claims about 8 us of the server's time run or
# not; the variants with them carry the attempts' costs in the claim instead of a statement
# beside it (the children's CPU at batch 1: 246 against 339 us a job).
UNRECORDED = "_unrecorded"

# The variants, by name: (with limits, with the second pass, with the aged pick, the shape of
# its next: "walk" the tenant walk, "flat" past the cursors, "head" from the head, whether it
# carries completions, whether it records history and costs). Each is a
# statement the server plans once per session; the child sends the leanest that is right for
# its claim (variant). Each step a variant leaves out is one measured to cost
# every claim that has no use for it: the aged pick's nodes (38 of an empty batch-10 claim's
# 118) took 0.2 of its 0.48 ms on the server, though behind a one-time filter they never run
# (executor start-up and shutdown walk every node; scripts/benchmarks/idle_claim_cost.py).
_CARRYING = {
    **{
        _name(limits, second_pass, aging): (limits, second_pass, aging, "walk")
        for aging in (True, False)
        for limits in (True, False)
        for second_pass in (True, False)
    },
    FLAT: (False, False, False, "flat"),
    FLAT_HEAD: (False, False, False, "head"),
}
VARIANTS = {
    **{name: (*shape, True, True) for name, shape in _CARRYING.items()},
    **{name + UNRECORDED: (*shape, True, False) for name, shape in _CARRYING.items()},
    FLAT_HEAD_FRESH: (False, False, False, "head", False, False),
}


def variant(
    *, limits: bool, batch: int, aging: bool, tenants: bool = True, cursors: bool = True
) -> str:
    """The claim variant for a batch of ``batch`` jobs, ``limits``: whether the database may
    hold limits (False only once a claim said it has none: the unlimited variants claim nothing
    when one exists, and say so); ``aging``: whether any queue of the claim ages its jobs (the
    unaged variants pick in the plain claim order whatever the aging parameter says). A batch
    of one needs no second pass: the first gives every tenant visited a share of at least one
    job, which is the whole batch. ``tenants``: whether the claim must share among tenants
    (False only while none of the child's claims has returned a job with a tenant): without
    limits and aging, such a claim is the flat one (flat.sql), which claims every tenant's jobs
    in the global claim order, without the walk; ``cursors``: whether the claim is sent with
    any (without: the flat claim from the head)."""
    if not tenants and not limits and not aging:
        return FLAT if cursors else FLAT_HEAD
    return _name(limits, batch != 1, aging)


def carrying(name: str, done: bool, history: bool = True) -> str:
    """The variant to send for claim ``name`` with (``done``) or without finished jobs to
    complete in it, by a child that keeps ``history`` or not: the claim from the head has one
    without completions, and each carrying claim one without history (UNRECORDED)."""
    if name == FLAT_HEAD and not done:
        return FLAT_HEAD_FRESH
    return name if history else name + UNRECORDED


@cache
def statement(name: str = "claim") -> str:
    """The claim variant ``name`` as the server receives it (with ``%(name)s`` placeholders).

    ``claim``: every step. ``_one``: without the second pass (a batch of one). ``_unlimited``:
    the claim of a database without limits (no row in pgq.queue_limits): no allowance, caps or
    held_back, a tenant's room the batch; it claims nothing once a limit exists and says so
    (``limits_found`` in its last row). ``_unaged``: without the aged pick (no queue of the
    claim ages). ``claim_flat_unlimited_unaged``: both, and without the tenant walk (flat.sql);
    ``claim_flat_head_unlimited_unaged``: the same from the head, without cursors; ``_fresh``:
    that without completions (``carrying``); ``_unrecorded``: without the history's steps (a
    child that keeps no history)."""
    if name not in VARIANTS:
        raise ValueError(f"no claim variant {name!r} (known: {', '.join(VARIANTS)})")
    limits, second_pass, aging, shape, carries, recorded = VARIANTS[name]
    steps = [("done", piece("done"))] if carries else []
    if recorded:
        steps += [("recorded", piece("recorded")), ("spent", piece("spent"))]
    steps.append(("token", piece("token")))
    completed = {
        "completed": "d.ids" if carries else "NULL::bigint[]",
        "carried": piece("carried") if carries else "",
    }
    if limits:
        steps.append(("allowance", piece("allowance")))
    if shape == "walk":
        steps.append(("next", _next(limits, second_pass, aging)))
    else:
        steps.append(("next", _flat_next(past_cursor=shape == "flat")))
    if limits:
        steps.append(("capped", piece("capped")))
    steps.append(("claimed", piece("claimed", kept="capped" if limits else "next")))
    if limits:
        steps.append(("held_back", piece("held_back")))
        reply = piece(
            "reply",
            wait="(SELECT wait FROM held_back)",
            limits_column="",
            limits_value="",
            **completed,
        )
    else:
        reply = piece(
            "reply",
            wait="NULL::float8",
            limits_column=",\nNULL::boolean AS limits_found",
            limits_value=",\n" + piece("limits_found"),
            **completed,
        )
    return _cte(steps, reply.rstrip())


@cache
def native(name: str = "claim") -> tuple[str, tuple[str, ...]]:
    """``statement`` with PostgreSQL's own ``$n`` placeholders and their names in order."""
    return native_text(statement(name))
