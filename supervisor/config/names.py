"""Queue names the config does not serve: the refusal, with the closest name it does serve.

One wording for every path that takes a queue name from a person (`enqueue --queue`, `queues
pause`, the dashboard's pause), so a typo is caught the same way wherever it is typed.
"""

from __future__ import annotations

import difflib

from supervisor.config.model import Config


def served_queues(config: Config) -> list[str]:
    return sorted({q for pool in config.pools.values() for q in pool.queues})


def closest(name: str, choices: list[str]) -> str | None:
    found = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return found[0] if found else None


def unserved_queue(config: Config, queue: str) -> str | None:
    """Why ``queue`` looks like a typo (no pool of the config serves it), or None."""
    served = served_queues(config)
    if queue in served:
        return None
    near = closest(queue, served)
    hint = f"did you mean {near!r}? " if near else ""
    listed = ", ".join(served)
    return f"no pool in {config.path} serves queue {queue!r}; {hint}(queues served: {listed})"
