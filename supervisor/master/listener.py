"""The master's LISTEN session: which queues another host's enqueue woke, and when the stager
should look again.

LISTEN needs a session of its own, never through a transaction pooler; without a listen_dsn
there is no listener at all and idle children poll. Its socket joins the master's selector
(again after every reconnect); the loop reads it when it is readable.
"""

from __future__ import annotations

import contextlib
import selectors
from dataclasses import dataclass, field
from typing import Any

import psycopg

from supervisor.sessions.database import MasterDatabase

NOTIFY_CHANNEL = "pgq_jobs"
# Jobs were scheduled for later: the stager reads the earliest run_at again.
SCHEDULED_CHANNEL = "pgq_scheduled"


@dataclass
class Heard:
    """What the notifications since the last read said."""

    queues: list[str] = field(default_factory=list)  # each once, in the order first heard
    scheduled: bool = False


class Listener:
    def __init__(
        self, dsn: str, *, connect_timeout: float, selector: selectors.BaseSelector
    ) -> None:
        self.session = MasterDatabase(
            dsn,
            name="listener",
            connect_timeout=connect_timeout,
            on_connect=self._listen,
        )
        self.selector = selector
        self.fd: int | None = None
        # Notifications psycopg read while the LISTEN ran (a commit between LISTEN's and the
        # reply): read() returns them first, since ``arrived`` reads only the socket.
        self.early: list[tuple[str, str, int]] = []

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}; LISTEN {SCHEDULED_CHANNEL}")
        self.early += [(n.channel, n.payload, n.pid) for n in conn.notifies(timeout=0)]

    def refresh(self) -> None:
        """(Re)connect when due, and keep the selector watching the current socket."""
        conn = self.session.connection()
        fd = conn.fileno() if conn is not None else None
        if fd == self.fd:
            return
        if self.fd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.fd)
        if fd is not None:
            self.selector.register(fd, selectors.EVENT_READ, self)
        self.fd = fd

    def read(self, own_pid: int | None) -> Heard:
        """The notifications waiting, leaving out the master's own job NOTIFYs (``own_pid``:
        the stager and the scheduler wake this host's children themselves; theirs are for
        the other hosts)."""
        notifies = self.session.run("listen", arrived) or []
        if self.early:
            notifies, self.early = self.early + notifies, []
        heard = Heard()
        for channel, payload, pid in notifies:
            if channel == SCHEDULED_CHANNEL:
                heard.scheduled = True
            elif pid != own_pid:
                heard.queues.append(payload)
        heard.queues = list(dict.fromkeys(heard.queues))
        return heard

    def fileno(self) -> int | None:
        return self.session.fileno()

    def close(self) -> None:
        self.session.close()


def arrived(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
    """The notifications that have reached the socket (channel, payload, sender's pid), read
    through libpq without waiting: the loop calls this only once the socket is readable.
    psycopg's ``notifies(timeout=0)`` made the same read through its generator and a wait with
    a timeout, about 100 us of the master's time between a job's NOTIFY arriving and the
    wake-up of its child (the idle pickup, issue 29). The listener runs no statement after its
    LISTEN (the notifications psycopg read during that are Listener.early); a broken connection
    raises psycopg.OperationalError here, and the session is opened again."""
    pgconn = conn.pgconn
    pgconn.consume_input()
    encoding = conn.info.encoding
    found = []
    while (n := pgconn.notifies()) is not None:
        found.append((n.relname.decode(encoding), n.extra.decode(encoding), n.be_pid))
    return found
