"""The jobs the demo enqueues: invoices to render, webhooks to deliver, accounts to sync.

The same jobs every run (a seeded generator), so two runs can be compared.
"""

from __future__ import annotations

import random

from examples.flaky import POISONED_EVERY as UPSTREAM_POISONED
from supervisor import NewJob

# The queues and kinds below; the supervisor's config must route and handle all of them.
QUEUES = ("pdf", "reports", "webhooks", "sync")
KINDS = ("render_pdf", "deliver_webhook", "sync_account")
# The upstream of the account sync fails this share of attempts (examples.flaky).
SYNC_FAIL_RATE = 0.3
# Every 12th account, the 6th first, is one the upstream can never serve.
POISONED_PLACE, POISONED_EVERY = 5, 12
CUSTOMERS = (
    "Acme Widgets Ltd",
    "Northwind Traders",
    "Globex Corporation",
    "Initech",
    "Umbrella Health",
    "Soylent Foods",
    "Hooli",
    "Vandelay Industries",
    "Müller & Söhne GmbH",
    "Café Olé",
)
EVENTS = ("invoice.sent", "invoice.paid", "invoice.overdue", "customer.updated")


def account_ids(count: int) -> list[int]:
    """Account ids from 1001 up, with one the upstream can never serve (a multiple of 17, see
    examples.flaky) at every POISONED_EVERY-th place, so that even a small demo has a dead
    letter to look at."""
    ids, candidate = [], 1000
    for place in range(count):
        candidate += 1
        poisoned = place % POISONED_EVERY == POISONED_PLACE
        while (candidate % UPSTREAM_POISONED == 0) != poisoned:
            candidate += 1
        ids.append(candidate)
    return ids


def plan_jobs(
    invoices: int, webhooks: int, syncs: int, *, out_dir: str, sink_url: str
) -> list[NewJob]:
    rng = random.Random(5)
    jobs = []
    for invoice_id in range(1, invoices + 1):
        # Every fourth is a month-end statement: longer, and on the low-weight reports queue,
        # which the weights keep moving while the pdf queue is busy.
        statement = invoice_id % 4 == 0
        invoice = {
            "invoice_id": invoice_id,
            "customer": rng.choice(CUSTOMERS),
            "lines": rng.randint(30, 60) if statement else rng.randint(8, 30),
            "out_dir": out_dir,
        }
        queue = "reports" if statement else "pdf"
        jobs.append(NewJob("render_pdf", invoice, queue, priority=rng.choice((0, 0, 0, 5, 10))))
    for n in range(1, webhooks + 1):
        event = rng.choice(EVENTS)
        payload = {"invoice": f"INV-{n:06d}", "amount_cents": rng.randint(1_000, 500_000)}
        delivery = {"url": sink_url, "event": event, "payload": payload}
        priority = 5 if event == "invoice.paid" else 0
        jobs.append(NewJob("deliver_webhook", delivery, "webhooks", priority=priority))
    for account in account_ids(syncs):
        sync = {"account_id": account, "fail_rate": SYNC_FAIL_RATE}
        jobs.append(NewJob("sync_account", sync, "sync"))
    return jobs
