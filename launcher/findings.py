"""What `doctor` and `doctor --probe` report, one finding per line: (status, message, fix), the status "ok",
"warn" or "FAIL", the fix what to do (for a warn: what it means)."""

from __future__ import annotations

from collections.abc import Iterable

from srl_hpc import graph as wiring

OK, WARN, FAIL = "ok", "warn", "FAIL"
Result = tuple[str, str, str]  # (status, message, fix)


def compact(names: Iterable[str]) -> str:
    """Worker names as a finding shows them: runs of one kind folded (actor/0-15)."""
    return ", ".join(wiring.compact(names))
