"""The library an application imports: the queue table and everything that reads or writes it.

enqueue (putting jobs in), jobs (claiming and every fenced write after the claim), outcomes
(what a handler may say about its job), context (what a running handler may know), queries (the
named SQL of sql/*.sql), migrations, maintenance (rescue, requeue, purge, replay, stats),
dsn (connections with readable errors and no secrets), locks (advisory lock keys). Nothing here
imports the supervisor's processes, its command line or its metrics.
"""
