"""`python -m supervisor.cli`: the same as the `pgq-supervisor` command."""

import sys

from supervisor.cli.main import main

sys.exit(main())
