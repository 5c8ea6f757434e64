"""Ends the start-up barrier's wait for a worker that srun saw die before it arrived.

A worker that exits by itself before the rendezvous abandons the barrier (srl_hpc.services.rendezvous), and
the others stop waiting within seconds. One killed by a signal (SIGKILL, the kernel's OOM killer, a crash in
native code) cannot, and the others would wait for the barrier's timeout. srun itself reports every task
that ends badly on its standard error, which the job script sends to RUN/slurm-<job>.out; this watch, run
beside srun by the srun guard until the barrier has said go, reads those lines and abandons the barrier on
the dead task's behalf, naming its worker. Workers still inside MPI_Init's fence (which a task that died
before it never joins) cannot see the barrier: if srun has not ended a few seconds later, the watch ends it
(SIGTERM, which srun passes to every task; before the rendezvous nothing is lost).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from srl_hpc.rundir import RunDir
from srl_hpc.services.rendezvous import FileBarrier

# srun's words for a task that ended badly, e.g. "srun: error: n2: task 3: Killed" or
# "srun: error: n1: tasks 0-1,4: Exited with exit code 1"
TASK_END = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<why>.+)$")
# what `python -m srl_hpc.rundir RUN --next-attempt` prints as a requeued job starts again
ATTEMPT = re.compile(r"^.*: attempt \d+$", re.MULTILINE)
INTERVAL = 1.0  # seconds between looks at srun's output and the barrier
GRACE = 15.0  # seconds the others get to see the abandoned barrier and exit before srun is ended


def task_ends(text: str) -> list[tuple[int, str, str]]:
    """(task id, node, srun's reason) for each task srun reports ended badly in `text`."""
    ends = []
    for line in text.splitlines():
        match = TASK_END.match(line.strip())
        if match is None:
            continue
        for part in match["tasks"].split(","):
            first, _, last = part.partition("-")
            for task in range(int(first), int(last or first) + 1):
                ends.append((task, match["node"], match["why"]))
    return ends


def global_task(node: str, task: int, groups: list[tuple[list[str], int]]) -> int | None:
    """The run's task id of what srun calls `task` on `node`. In a het step srun numbers each component's tasks
    from 0; `groups` holds each component's nodes and its first task id (components never share a node). None
    where the node is in no component. Without components (one group) srun's number is the run's."""
    if not groups:
        return task
    return next((first + task for nodes, first in groups if node in nodes), None)


def het_groups(group_sizes: list[int], env, hostnames) -> list[tuple[list[str], int]]:
    """Each het component's nodes (SLURM_JOB_NODELIST_HET_GROUP_<k>, expanded by `hostnames`) and first task
    id, from the sizes of the run's groups in order; empty outside a het job."""
    if "SLURM_HET_SIZE" not in env:
        return []
    firsts = [sum(group_sizes[:k]) for k in range(len(group_sizes))]
    return [(hostnames(env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{k}", "")), first) for k, first in enumerate(firsts)]


def watch(
    run: RunDir,
    names: list[str],
    output: Path,
    alive,
    interval: float = INTERVAL,
    groups: Sequence[tuple[list[str], int]] = (),
) -> str | None:
    """Until the barrier has said go (or srun or the run has ended: `alive()` false, a summary), abandon the
    barrier for the first task srun reports dead. Returns that worker's name, or None. Lines before the current
    attempt's marker (a requeued job's output holds its earlier attempts') are not this attempt's."""
    offset, pending = 0, b""
    task: int | None
    while alive() and not run.barrier_go.exists() and not run.summary.exists():
        time.sleep(interval)
        try:
            with open(output, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            continue
        offset += len(data)
        *lines, pending = (pending + data).split(b"\n")
        text = b"\n".join(lines).decode(errors="replace")
        text = ATTEMPT.split(text)[-1]
        for task, node, why in task_ends(text):
            task = global_task(node, task, list(groups))
            if task is None or not 0 <= task < len(names):
                continue
            print(
                f"start_watch: task {task} ({names[task]}) on {node} ended before the rendezvous ({why}); the "
                f"other workers stop waiting for it",
                flush=True,
            )
            FileBarrier(run, names, names[task]).abandon()
            return names[task]
    return None


def end_srun_if_stuck(srun_pid: int, alive, grace: float = GRACE) -> bool:
    """After an abandon: wait `grace` seconds for srun to end with its tasks, then send it SIGTERM. True if sent."""
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    if not alive():
        return False
    print(
        f"start_watch: srun (pid {srun_pid}) still runs {grace:.0f}s after the abandon (workers waiting inside "
        f"MPI_Init cannot see it); ending it",
        flush=True,
    )
    os.kill(srun_pid, signal.SIGTERM)
    return True
