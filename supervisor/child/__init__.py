"""A child: the process the master forks to run jobs, in parts.

worker (child_main, Worker: build the parts, pick a loop, leave) over parts (built once after
the fork, and the jobs in hand): process (signals, parent death, title), session (the child's
connection, its reconnects), claimer (with weights), completer (the outcome writer), executor
(one job), questions (what handlers ask, answered on the main thread), limits; the loops,
inline (one thread) and threaded (on pool, the thread pool). Imports nothing of
supervisor.master or supervisor.services.
"""
