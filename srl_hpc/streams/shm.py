"""The shared-memory segments of the same-node inference transport (srl_hpc/streams/inference.py): their
names, tied to the run, the actor and its incarnation, and their removal, by the actor that made one, by
the supervisor that replaces a killed actor, and by the local launcher at the end of a run (a killed actor
cannot remove its own)."""

from __future__ import annotations

import hashlib
import shutil
from multiprocessing import shared_memory
from pathlib import Path

from srl_hpc.streams import unix

SHM_PREFIX = "srl-"


def shm_name(run_dir, worker: str, incarnation: int = 0) -> str:
    """A segment name tied to the run, worker and incarnation (a restarted actor's segment is a new one: a
    policy worker still holds the old one mapped), so that what a killed actor left can be removed."""
    restart = f"-r{incarnation}" if incarnation else ""
    return f"{_run_prefix(run_dir)}{worker.replace('/', '-')}{restart}"


def _run_prefix(run_dir) -> str:
    return f"{SHM_PREFIX}{hashlib.sha1(str(run_dir).encode()).hexdigest()[:12]}-"


def remove_run_segments(run_dir) -> list[str]:
    """Unlink every segment the run's actors left (killed ones cannot remove their own), and the directory of
    its same-node sockets; returns their names."""
    shm_dir = Path("/dev/shm")
    names = [p.name for p in shm_dir.glob(f"{_run_prefix(run_dir)}*")] if shm_dir.is_dir() else []
    removed = [name for name in names if remove_segment(name)]
    sockets = unix.socket_dir(run_dir)
    if sockets.is_dir():
        shutil.rmtree(sockets, ignore_errors=True)
        removed.append(sockets.name)
    return removed


def remove_segment(name: str) -> bool:
    """Unlink a leftover segment; False if there was none."""
    try:
        shm = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    shm.close()
    try:
        shm.unlink()  # (also ends the resource tracker's claim that attaching made)
    except FileNotFoundError:  # its actor removed it meanwhile
        return False
    return True
