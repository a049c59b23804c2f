"""The processes: the master and the children it forks.

master (the loop: signals, reaping, limits, slots, services), children (the master's record of
them, and forking one), services and vacuum (the master's periodic duties), database (the
master's session), registry (who runs where). worker (a child's loop: claim, run, write) with
execution (running one job) and weights (which queue to claim from). Shared by both sides: board
(the shared-memory status a child writes and the master reads), exits (exit codes and reasons),
memory (what a child really uses), proctitle. A child imports nothing of the master.
"""
