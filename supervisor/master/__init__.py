"""The master: one single-threaded loop that owns the children.

loop (Master: the turn of named steps, the wait that says what woke it, its handle_*), reaping
and stopping (parts of Master in modules of their own), children (the record of a child, and
forking one), pools (a pool as run; which child a wake-up goes to), listener (the LISTEN
session). Its periodic duties are supervisor.services, the child it forks supervisor.child,
and what both sides of the fork read supervisor.shared.
"""
