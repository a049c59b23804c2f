"""The master: the loop that owns the children.

loop (signals, reaping, limits, slots, services, sleep) and children (the master's record of its
children, and forking one). Its periodic duties live in supervisor.services, the child it forks
in supervisor.child, and what both sides of the fork read in supervisor.shared.
"""
