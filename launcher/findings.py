"""What `doctor` and `doctor --probe` report, one finding per line: (status, message, fix), the status "ok",
"warn" or "FAIL", the fix what to do (for a warn: what it means)."""
from __future__ import annotations

OK, WARN, FAIL = "ok", "warn", "FAIL"
Result = tuple[str, str, str]  # (status, message, fix)
