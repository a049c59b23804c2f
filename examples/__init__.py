"""Example handlers for pgq-supervisor, one per kind of workload on the design card.

- ``examples.pdf:render_invoice``: CPU-heavy invoice PDFs (process pools, small batches).
- ``examples.webhooks:deliver_webhook``: I/O-bound HTTP delivery (threaded pools).
- ``examples.flaky:sync_account``: a nightly sync that sometimes fails (retries, dead letters).
- ``examples.noop:noop`` and ``examples.noop:sleep``: benchmarks.

``examples.sink.WebhookSink`` receives the webhooks in demos and tests.

Nothing here opens a connection, starts a thread or touches a file at import time: handlers
are imported by the master and inherited by forked children.
"""
