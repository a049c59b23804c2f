#!/usr/bin/env bash
# Install the project with the benchmark extra (PgQueuer, Procrastinate) into .venv, then run the
# suite: scripts/benchmarks/bench.py against PGQ_BENCH_DSN, or the machine's PostgreSQL on
# 127.0.0.1:5432.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[bench]'
exec .venv/bin/python scripts/benchmarks/bench.py "$@"
