"""The dashboard's actions: a confirmation page (GET), then the action itself (POST).

Every action has one URL. GET shows what it will do and a button; the button POSTs the same URL
with the anti-forgery token; the POST does it, and redirects back to the page it came from with
a sentence saying what it did (a short-lived cookie, shown once). A POST without a valid token
is refused with 403 and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from supervisor.config.names import unserved_queue
from supervisor.queue.maintenance import ReplayFilter
from supervisor.queue.queries import query
from supervisor.views.text import age
from supervisor.web import audit
from supervisor.web.actions import ActionError, Done
from supervisor.web.security import csrf_problem
from supervisor.web.site import FLASH_COOKIE, Site, duration, root_path


@dataclass(frozen=True)
class Plan:
    """What a confirmed POST will do: the question to ask, the button, and the work."""

    title: str
    question: str
    button: str
    back: str
    fields: Mapping[str, str]
    run: Callable[[], Awaitable[Done]]
    danger: bool = False
    # The way out, worded so it cannot be read as the action: "Keep job 230", not "Cancel".
    keep: str = "Go back"


def action(
    site: Site, name: str, plan_for: Callable[[Mapping[str, str]], Plan]
) -> Callable[..., Any]:
    """An endpoint that confirms on GET and acts on POST; every POST that acts (or fails) is
    written to the audit log."""

    async def endpoint(request: Request) -> Response:
        if site.web.read_only:
            return site.render(
                request,
                "error.html",
                status_code=403,
                message="this dashboard is read-only (web.read_only or --read-only): it shows, "
                "it does not act",
            )
        if request.method == "GET":
            # A repeated field (the ticked boxes of /jobs: ids=4&ids=7) arrives joined.
            query = request.query_params
            values = {k: " ".join(query.getlist(k)) for k in query} | request.path_params
            return site.render(request, "confirm.html", plan=plan_for(values))
        form = await request.form()
        problem = csrf_problem(request, form, site.exposure.host_allowed)
        if problem:
            return site.render(
                request, "error.html", status_code=403, message=f"refused: {problem}"
            )
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        plan = plan_for({**values, **request.path_params})
        try:
            done = await plan.run()
        except ActionError as exc:
            audit.record(request, name, plan.fields, failed=str(exc))
            return site.render(request, "error.html", status_code=500, message=str(exc))
        audit.record(request, name, plan.fields, done=done)
        response = RedirectResponse(root_path(request) + plan.back, status_code=303)
        # Percent-encoded: a queue or error named in the sentence may hold any character.
        flash = quote(done.said, safe=" ")
        response.set_cookie(FLASH_COOKIE, flash, max_age=60, httponly=True, samesite="strict")
        return response

    return endpoint


def routes(site: Site, queue_page: Callable[[Request], Awaitable[Response]]) -> list[Route]:
    def replay_job(values: Mapping[str, Any]) -> Plan:
        job_id = int(values["job_id"])
        return Plan(
            title=f"Replay job {job_id}",
            question=f"Put dead letter {job_id} back in its queue, attempts reset, due now?",
            button=f"Replay job {job_id}",
            back=f"/jobs/{job_id}",
            fields={},
            run=lambda: site.actions.replay(ReplayFilter(ids=[job_id])),
        )

    def filters(values: Mapping[str, Any]) -> tuple[dict[str, str], str]:
        kept = {k: str(values[k]).strip() for k in ("kind", "queue", "older_than")}
        kept = {k: v for k, v in kept.items() if v}
        words = [f"of kind {kept['kind']}" if "kind" in kept else ""]
        words.append(f"in queue {kept['queue']}" if "queue" in kept else "")
        words.append(f"older than {kept['older_than']}" if "older_than" in kept else "")
        return kept, " ".join(w for w in words if w)

    def replay_many(values: Mapping[str, Any]) -> Plan:
        kept, words = filters({k: values.get(k, "") for k in ("kind", "queue", "older_than")})
        everything = values.get("all") == "1"
        if not kept and not everything:
            raise HTTPException(400, "replay needs a kind, a queue or an age (or all=1)")
        older = duration(kept.get("older_than"), "older than")
        which = ReplayFilter(
            kind=kept.get("kind"),
            queue=kept.get("queue"),
            everything=everything,
        )
        return Plan(
            title="Replay dead letters",
            question=f"Put every dead letter {words or 'there is'} back in its queue, attempts "
            "reset, due now?",
            button="Replay them",
            back=f"/dead?{urlencode(kept)}",
            fields={**kept, **({"all": "1"} if everything else {})},
            run=lambda: site.actions.replay(which, older_than=older),
        )

    def purge_many(values: Mapping[str, Any]) -> Plan:
        kept, words = filters({k: values.get(k, "") for k in ("kind", "queue", "older_than")})
        older = duration(kept.get("older_than"), "older than")
        if older is None:
            raise HTTPException(400, "purge needs an age: older than (e.g. 7d, or 0s for all)")
        return Plan(
            title="Purge dead letters",
            question=f"Delete every dead letter {words} for good ({age(older)} and older)? "
            "This cannot be undone.",
            button="Purge them",
            back=f"/dead?{urlencode({k: v for k, v in kept.items() if k != 'older_than'})}",
            fields=kept,
            run=lambda: site.actions.purge(older, kept.get("kind"), kept.get("queue")),
            danger=True,
            keep="Keep them",
        )

    def cancel_job(values: Mapping[str, Any]) -> Plan:
        job_id = int(values["job_id"])
        return Plan(
            title=f"Cancel job {job_id}",
            question=f"Cancel job {job_id}? A waiting job will never run; a running one is "
            "stopped by its supervisor (its process group, as on a timeout) and ends cancelled.",
            button=f"Cancel job {job_id}",
            back=f"/jobs/{job_id}",
            fields={},
            run=lambda: site.actions.cancel(job_id),
            danger=True,
            keep=f"Keep job {job_id}",
        )

    def resolve_job(values: Mapping[str, Any]) -> Plan:
        job_id = int(values["job_id"])
        resolution = str(values.get("as", ""))
        meaning = {
            "completed": "its effect happened: record it completed, never run it again",
            "retry": "its effect did not happen: run it again now",
            "discarded": "give up on it: make it a dead letter",
        }
        if resolution not in meaning:
            raise HTTPException(400, "as must be completed, retry or discarded")
        return Plan(
            title=f"Resolve job {job_id} as {resolution}",
            question=f"Job {job_id}'s outcome is unknown (effects: external). Check the outside "
            f"system first. Resolve it as {resolution} ({meaning[resolution]})?",
            button=f"Resolve as {resolution}",
            back=f"/jobs/{job_id}",
            fields={"as": resolution},
            run=lambda: site.actions.resolve(job_id, resolution),
            danger=resolution != "retry",
        )

    def run_now(values: Mapping[str, Any]) -> Plan:
        job_id = int(values["job_id"])
        return Plan(
            title=f"Run job {job_id} now",
            question=f"Make job {job_id} due now (its attempts are kept)?",
            button=f"Run job {job_id} now",
            back=f"/jobs/{job_id}",
            fields={},
            run=lambda: site.actions.retry_now(job_id),
        )

    def pause(values: Mapping[str, Any]) -> Plan:
        queue = str(values["queue"])
        return Plan(
            title=f"Pause queue {queue}",
            question=f"Pause queue {queue} on every host? Running jobs finish; no new job is "
            "claimed from it until it is resumed (enqueueing still works).",
            button=f"Pause {queue}",
            back=f"/queues/{quote(queue, safe='')}",
            fields={},
            run=lambda: site.actions.pause(queue),
            danger=True,
        )

    def resume(values: Mapping[str, Any]) -> Plan:
        queue = str(values["queue"])
        return Plan(
            title=f"Resume queue {queue}",
            question=f"Resume queue {queue}? Every host claims from it again at once.",
            button=f"Resume {queue}",
            back=f"/queues/{quote(queue, safe='')}",
            fields={},
            run=lambda: site.actions.resume(queue),
        )

    queue_actions = {
        "pause": action(site, "pause queue", pause),
        "resume": action(site, "resume queue", resume),
    }

    async def queue_paths(request: Request) -> Response:
        # By the path's structure: /queues/NAME is the queue's page and /queues/NAME/pause its
        # action, with NAME one percent-encoded segment; a queue named "x/pause" is
        # /queues/x%2Fpause, never the pause action of queue x.
        parts = queue_path_parts(request)
        if len(parts) == 1 and request.method == "GET":
            request.scope["path_params"] = {"queue": parts[0]}
            return await queue_page(request)
        if len(parts) == 2 and parts[1] in queue_actions:
            request.scope["path_params"] = {"queue": parts[0]}
            refusal = await unserved(site, parts[0]) if parts[1] == "pause" else None
            if refusal:
                return site.render(request, "error.html", status_code=400, message=refusal)
            return await queue_actions[parts[1]](request)  # type: ignore[no-any-return]
        raise HTTPException(404, "no such page (a queue's name is one percent-encoded segment)")

    both = ["GET", "POST"]
    return [
        Route("/jobs/{job_id:int}/cancel", action(site, "cancel job", cancel_job), methods=both),
        Route("/jobs/{job_id:int}/run-now", action(site, "run job now", run_now), methods=both),
        Route("/jobs/{job_id:int}/resolve", action(site, "resolve job", resolve_job), methods=both),
        Route("/queues/{rest:path}", queue_paths, methods=both),
        Route("/jobs/{job_id:int}/replay", action(site, "replay job", replay_job), methods=both),
        Route("/dead/replay", action(site, "replay dead letters", replay_many), methods=both),
        Route("/dead/purge", action(site, "purge dead letters", purge_many), methods=both),
    ]


async def unserved(site: Site, queue: str) -> str | None:
    """The refusal to pause a queue no pool of the config serves, no job waits in and that is
    not paused (a typo), naming the closest served queue; None when it is in use or there is
    no config to tell."""
    refusal = unserved_queue(site.config, queue) if site.config is not None else None
    if refusal is None:
        return None
    async with site.pool.connection() as conn:
        row = await (await conn.execute(query("queue_in_use"), {"queue": queue})).fetchone()
    if row and row[0]:
        return None
    return (
        f"{refusal}, no job waits in it and it is not paused: pausing it would change nothing. "
        "Pause it ahead of its first job with `pgq-supervisor queues pause --any-queue`"
    )


def queue_path_parts(request: Request) -> list[str]:
    """The segments after /queues/, split on the slashes of the path as sent (raw_path) and
    each one decoded."""
    raw = request.scope.get("raw_path")
    prefix = quote(request.scope.get("root_path", "")) + "/queues/"
    if raw is not None:
        sent = raw.decode("latin-1")
        if sent.startswith(prefix):
            return [unquote(part) for part in sent[len(prefix) :].split("/")]
    # A server that gives no raw path: the decoded one, where a queue's own slash is lost.
    return str(request.path_params.get("rest", "")).split("/")
