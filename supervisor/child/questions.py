"""What a running handler asks the database (``lease_held()``, ``cancelled()``), answered on
the child's main thread, which owns the session.

A psycopg connection belongs to one thread at a time, and the main thread's pipelined writes
hold it for the pipeline's whole life: a handler thread that used it beside them would read
another statement's result, or break the connection under the main thread. So a handler on
the main thread (a single-threaded pool) asks directly, and a handler thread posts its question
here and waits; the main thread answers between its own steps (its waits watch this queue's
pipe). No answer within ANSWER_WITHIN (the main thread is reconnecting, or busy writing) is
"could not ask" (None): the handler's context keeps its last known answer and asks again.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from supervisor.child.process import drain
from supervisor.child.session import ChildSession

ANSWER_WITHIN = 2.0

Question = Callable[[psycopg.Connection[Any]], bool]


@dataclass
class _Asked:
    question: Question
    answer: bool | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Questions:
    def __init__(self, session: ChildSession) -> None:
        self.session = session
        self._asked: queue_mod.SimpleQueue[_Asked] = queue_mod.SimpleQueue()
        self.fd, self._w = os.pipe()  # the main thread's waits watch fd
        os.set_blocking(self.fd, False)
        os.set_blocking(self._w, False)

    def ask(self, question: Question) -> bool | None:
        """The answer, or None when it could not be had in time."""
        if threading.current_thread() is threading.main_thread():
            return self.session.ask(question)
        asked = _Asked(question)
        self._asked.put(asked)
        with contextlib.suppress(BlockingIOError):
            os.write(self._w, b"?")
        if not asked.done.wait(ANSWER_WITHIN):
            return None  # answered later, if at all, to nobody
        return asked.answer

    def answer(self) -> int:
        """On the main thread: answer every question waiting; how many."""
        drain(self.fd)
        answered = 0
        while True:
            try:
                asked = self._asked.get_nowait()
            except queue_mod.Empty:
                return answered
            try:
                asked.answer = self.session.ask(asked.question)
            finally:
                asked.done.set()
            answered += 1
