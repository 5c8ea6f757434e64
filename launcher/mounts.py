"""Where a path lives: the mount holding it and that filesystem's type, read from /proc/mounts' text (pure).

doctor reports the run directory's filesystem; submission refuses one that only a single machine has (tmpfs).
"""

from __future__ import annotations

import re
from pathlib import Path


def filesystem_of(path: Path, mounts: str) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding `path`, from /proc/mounts' text: the longest
    mount point that is a prefix of the path; of equal ones the last (the one mounted on top)."""
    best: tuple[str, str] | None = None
    for entry in mounts.splitlines():
        fields = entry.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])  # \040 is a space
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[2])
    return best or ("/", "unknown")
