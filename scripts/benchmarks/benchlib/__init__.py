"""The peer and database-limit half of the benchmark suite.

- ``peers_pgqueuer`` and ``peers_procrastinate``: ``drain`` (jobs/s emptying a backlog of no-op
  jobs) and ``pickup`` (how long an idle worker takes to start a job after its enqueue commits)
  for each peer, run as the library's own worker processes.
- ``limit``: the database's own ceiling for our claim-then-delete SQL, driven by pgbench.
- ``common``: what they share (fresh databases, worker processes, clocks, statistics).
- ``peers_cli``: runs the peers and the limit alone and prints a table and one JSON line.

Every scenario runs in a database of its own, created for it and dropped after it, on the
server named by the DSN it is given. Every time is read from the database clock.
"""
