"""The thread pool of a threaded child: handler threads fed from a hand-off queue.

The main thread posts claimed jobs; each handler thread runs one at a time and hands back its
settlement, waking the main thread through a pipe. Jobs still in the hand-off queue have not
started and can be taken back.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import threading
from collections.abc import Callable, Iterator

from supervisor.queue import outcomes
from supervisor.queue.jobs import Job

Finished = tuple[Job, outcomes.Settlement | None]


class ThreadPool:
    def __init__(
        self,
        size: int,
        run: Callable[[Job, int], outcomes.Settlement | None],
        handed_out: dict[int, Job],
    ) -> None:
        self.size = size
        self.run = run
        self._work: queue_mod.SimpleQueue[Job | None] = queue_mod.SimpleQueue()
        self._done: queue_mod.SimpleQueue[Finished] = queue_mod.SimpleQueue()
        # Jobs handed to the threads and not yet back (the child's hand shows them too).
        self.handed_out = handed_out
        self.done_r, self._done_w = os.pipe()
        os.set_blocking(self.done_r, False)
        os.set_blocking(self._done_w, False)

    def start(self) -> None:
        for i in range(self.size):
            threading.Thread(
                target=self._serve, args=(i,), name=f"handler-{i}", daemon=True
            ).start()

    def _serve(self, index: int) -> None:
        while (job := self._work.get()) is not None:
            settlement = self.run(job, index)
            self._done.put((job, settlement))
            with contextlib.suppress(BlockingIOError):
                os.write(self._done_w, b".")

    @property
    def free(self) -> int:
        return self.size - len(self.handed_out)

    def post(self, job: Job) -> None:
        self.handed_out[job.id] = job
        self._work.put(job)

    def finished(self) -> Iterator[Finished]:
        """The jobs whose threads returned since the last call."""
        while True:
            try:
                job, settlement = self._done.get_nowait()
            except queue_mod.Empty:
                return
            self.handed_out.pop(job.id, None)
            yield job, settlement

    def take_back(self) -> list[Job]:
        """The jobs no thread has started yet, out of the hand-off queue."""
        taken = []
        while True:
            try:
                job = self._work.get_nowait()
            except queue_mod.Empty:
                return taken
            if job is not None:
                self.handed_out.pop(job.id, None)
                taken.append(job)

    def stop(self) -> None:
        """Threads still running a job leave after it (the process may leave first)."""
        for _ in range(self.size):
            self._work.put(None)
