"""The master's periodic services, one module each, all of one shape (base: Service, whose
run_once does a bounded piece of work and returns how many things it did; Host and
ChildRecord, all a service sees of the master, so nothing here imports supervisor.master).

leases, memory_watch, timeout_watch, cancel_watch, requeue, heartbeat (with registry, the rows
of who runs where), rescuer and purge (in slices), stager, scheduler, vacuum, metrics_feed.
The sessions they run on (the master's own, statements sent without waiting) are
supervisor.sessions.
"""
