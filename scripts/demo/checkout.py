"""Makes the checkout's root importable for the scripts run from it.

The demo's handlers (examples/) are not part of the wheel, so they are importable only from a
checkout: a script in scripts/demo/ sees scripts/demo/ on its path, not the repository root.
Import this first.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
