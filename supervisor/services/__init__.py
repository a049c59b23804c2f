"""The master's periodic services and the sessions they run on.

base (the one shape: Service, Host; leases, memory, timeouts, cancel requests, requeues),
slices (maintenance in bounded slices), rescuer, purge, stager, scheduler, vacuum, metrics_feed,
registry (who runs where); database (the master's own session) and pending (statements sent
without waiting).
"""
