#!/usr/bin/env bash
# Install the project and its test tools into .venv, then lint and run the whole test suite.
# Uses the database in PGQ_TEST_DSN when set; otherwise the tests start an embedded PostgreSQL.
# --fast leaves out the long drills (tests marked slow: chaos, fleet, partition, upgrade) for a
# quick loop; any other arguments go to pytest (a path, -k, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The documentation site builds without a warning (a broken link fails it); a few seconds.
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
if [ "${1:-}" = "--fast" ]; then
    shift
    set -- -m "not slow" "$@"
fi
exec .venv/bin/pytest -q "$@"
