"""The command line: `pgq-supervisor -c FILE [verb]`.

main (the entry point and `run`), verbs (what every verb shares), operator (`status`,
`enqueue`), dlq (the dead-letter verbs), session (the operator verbs' database session). The
`status` report and the plain-text formatting are supervisor.views (the dashboard shows them
too).
"""

from supervisor.clash import check_package_is_ours

check_package_is_ours()

from supervisor.cli.main import main  # noqa: E402

__all__ = ["main"]
