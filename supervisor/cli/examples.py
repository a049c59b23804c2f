"""Examples for every command's --help, and a description where a sub-command has only a
one-line help: what a newcomer reads first. Keyed by the command's words."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, list[str]] = {
    "run": ["-c queues.yaml", "-c queues.yaml --log-format json run"],
    "check": ["-c queues.yaml check", "-c queues.yaml check --json"],
    "migrate": ["-c queues.yaml migrate", "-c queues.yaml migrate --json"],
    "status": [
        "-c queues.yaml status",
        "-c queues.yaml status --watch 5",
        "-c queues.yaml status --json | jq '.warnings'",
    ],
    "enqueue": [
        "-c queues.yaml enqueue render_pdf '{\"invoice_id\": 42}' --queue pdf",
        "-c queues.yaml enqueue send_mail --delay 10m --unique-key mail:7",
    ],
    "doctor": ["-c queues.yaml doctor", "-c queues.yaml doctor --json"],
    "schedules": ["-c queues.yaml schedules", "-c queues.yaml schedules --json"],
    "web": ["-c queues.yaml web", "-c queues.yaml web --port 8080"],
    "batches show": ["-c queues.yaml batches show 12", "-c queues.yaml batches show 12 --json"],
    "jobs list": [
        "-c queues.yaml jobs list --state running",
        "-c queues.yaml jobs list --state waiting --queue ledger",
        "-c queues.yaml jobs list --queue pdf --kind render_pdf --limit 100 --json",
    ],
    "jobs show": ["-c queues.yaml jobs show 4711", "-c queues.yaml jobs show 4711 --json"],
    "jobs cancel": [
        "-c queues.yaml jobs cancel 4711 4712",
        "-c queues.yaml jobs cancel --queue pdf --kind render_pdf --dry-run",
        "-c queues.yaml jobs cancel --args '{\"customer\": 7}' --json",
        "-c queues.yaml jobs cancel --state waiting --kind post_entry --dry-run",
    ],
    "jobs retry": [
        "-c queues.yaml jobs retry 4711 4712",
        "-c queues.yaml jobs retry --queue webhooks --state scheduled --dry-run",
    ],
    "jobs replay": [
        "-c queues.yaml jobs replay 4711",
        "-c queues.yaml jobs replay --kind render_pdf --dry-run",
    ],
    "jobs resolve": ["-c queues.yaml jobs resolve 4711 --as completed"],
    "dlq list": [
        "-c queues.yaml dlq list",
        "-c queues.yaml dlq list --kind render_pdf --newer-than 1h --json",
    ],
    "dlq show": ["-c queues.yaml dlq show 4711"],
    "dlq replay": [
        "-c queues.yaml dlq replay --id 4711 4712",
        "-c queues.yaml dlq replay --kind render_pdf --older-than 1h",
    ],
    "dlq purge": [
        "-c queues.yaml dlq purge --older-than 14d --dry-run",
        "-c queues.yaml dlq purge --older-than 7d --kind render_pdf",
    ],
    "queues list": ["-c queues.yaml queues list", "-c queues.yaml queues list --json"],
    "queues pause": ["-c queues.yaml queues pause pdf reports"],
    "queues resume": ["-c queues.yaml queues resume pdf"],
    "queues paused": ["-c queues.yaml queues paused --json"],
    "workflows list": ["-c queues.yaml workflows list", "-c queues.yaml workflows list --json"],
    "workflows show": [
        "-c queues.yaml workflows show 12",
        "-c queues.yaml workflows show 12 --json",
    ],
    "workflows cancel": ["-c queues.yaml workflows cancel 12"],
    "keys new": ["-c queues.yaml keys new", "-c queues.yaml keys new k2"],
    "keys status": ["-c queues.yaml keys status", "-c queues.yaml keys status --json"],
    "keys rotate": [
        "-c queues.yaml keys rotate",
        "-c queues.yaml keys rotate --slice 500 --pause 0.5 --json",
    ],
}


def explain(parser: argparse.ArgumentParser, words: str, help_text: str | None) -> None:
    """Give a command's parser a description (its help, when it has none) and its examples."""
    if not parser.description and help_text:
        parser.description = help_text[0].upper() + help_text[1:] + "."
    examples = EXAMPLES.get(words)
    if examples:
        parser.epilog = "examples:\n" + "\n".join(f"  pgq-supervisor {e}" for e in examples)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
