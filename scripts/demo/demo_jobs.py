"""What the demo does: its options, the jobs it enqueues (invoices to render, webhooks to
deliver, accounts to sync) and what it needs of the supervisor's config.

The same jobs every run (a seeded generator), so two runs can be compared.
"""

from __future__ import annotations

import argparse
import random

import checkout  # noqa: F401  (examples/ is importable from the checkout only)

from examples.flaky import POISONED_EVERY as UPSTREAM_POISONED
from examples.invoice_workflow import ARCHIVE_QUEUE
from supervisor import NewJob
from supervisor.config import Config

# The queues and kinds below; the supervisor's config must route and handle all of them.
QUEUES = ("pdf", "reports", "webhooks", "sync")
KINDS = ("render_pdf", "deliver_webhook", "sync_account", "zip_invoices", "mail_archive")
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
    """Every job but the archive's two: the invoices first (the demo enqueues them as the
    first stage of the invoice workflow, examples.invoice_workflow)."""
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


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python scripts/demo/demo.py", description=description)
    parser.add_argument(
        "--invoices", type=_count, default=300, metavar="N", help="PDFs to render (300)"
    )
    parser.add_argument(
        "--webhooks", type=_count, default=150, metavar="N", help="webhooks to deliver (150)"
    )
    parser.add_argument(
        "--syncs", type=_count, default=60, metavar="N", help="account syncs to run (60)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="where the PDFs go (out/invoices in the repository)"
    )
    parser.add_argument(
        "--config", metavar="FILE", help="the supervisor's YAML (config/queues.yaml)"
    )
    parser.add_argument(
        "--dsn", help="a PostgreSQL instead of the embedded one (better: PGQ_DSN, not seen in ps)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="give up after (300 s)"
    )
    parser.add_argument("--log-dir", metavar="DIR", help="supervisor and receiver logs (out/demo)")
    parser.add_argument(
        "--json", metavar="FILE", help="also write the summary to this file, for scripts"
    )
    return parser.parse_args(argv)


def _count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"must be from 0 to 100000, got {value}")
    return value


def config_problems(config: Config) -> list[str]:
    """The demo reads completions from the history and needs every queue it uses served."""
    problems = []
    if not config.history.enabled:
        problems.append("history.enabled must be true: the demo counts completions there")
    problems += [f"handlers: no handler for {k}" for k in KINDS if k not in config.handlers]
    served = {q for pool in config.pools.values() for q in pool.queues}
    needed = (*QUEUES, ARCHIVE_QUEUE)
    problems += [f"pools: no pool serves queue {q!r}" for q in needed if q not in served]
    return [f"{config.path}: {p}" for p in problems]
