"""Local mode: every worker of the experiment as its own process on this machine.

Same entry point as a Slurm task (`python -m srl_hpc.worker`), rendezvous through files in the run
directory. The controller's progress goes to the terminal; every worker logs to RUN/logs/. Workers run
in their own session (Ctrl-C reaches only this launcher, which stops them in order) and die with it
(PR_SET_PDEATHSIG), so no process outlives a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir, tail
from srl_hpc.services import limits
from srl_hpc.streams import control, endpoints
from srl_hpc.streams.shm import remove_run_segments
from srl_hpc.worker.supervisor import describe_exit, die_with_parent

REPORT_WAIT = 40.0  # a controller told of a crash stops the run itself well within this (its STOP_TIMEOUT is 30 s)
GRACE = 25.0  # after the controller ends (or on a signal): how long workers get to wind down before SIGKILL


PROCESSES_PER_CORE = 32  # beyond this, start-up and heartbeats of an oversubscribed machine time out
PROCESS_MB = 120  # the least a worker process holds (python, numpy, zmq; actors of small envs)


class TooBigForThisMachine(ValueError):
    pass


def check_fits(exp) -> None:
    """Refuse, before anything starts, a run that would start more processes than this machine can hold, or
    whose busiest worker needs more open files than the hard limit allows (each worker raises its soft limit
    to the hard one: srl_hpc.services.limits)."""
    graph = wiring.build(exp)
    kinds = [node.kind for node in graph.workers]  # (per policy or member, where they are)
    counts = {kind: kinds.count(kind) for kind in ("actor", "policy", "trainer", "buffer", "eval", "controller")}
    total = sum(counts.values())
    cores = os.cpu_count() or 1
    available_mb = _mem_available_mb()
    fits = min(PROCESSES_PER_CORE * cores, available_mb // PROCESS_MB)
    if total > fits:
        biggest = max(("actor", "policy", "trainer", "buffer", "eval"), key=cast(Callable[[str], int], counts.get))
        listed = ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)
        raise TooBigForThisMachine(
            f"local mode would start {total:,} worker processes ({listed}); this machine ({cores} CPU cores, "
            f"{available_mb / 1024:.1f} GiB available) holds about {fits:,}. Run it on a cluster with --slurm, "
            f"or lower workers.{biggest}.count"
        )
    busiest, needed = limits.largest_need(graph)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise TooBigForThisMachine(limits.too_few_files(busiest, needed, len(graph.names), hard))


def _mem_available_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def run(exp, run: RunDir, out=sys.stdout) -> int:
    """Run the experiment to its end; returns the exit code (0 success, 1 failure, 130/143 interrupted)."""
    names = wiring.build(exp).names
    run.launcher_pid.write_text(str(os.getpid()))  # `srl-launch cancel RUN` signals this process
    procs: dict[str, subprocess.Popen] = {}
    for task_id, name in enumerate(names):
        log = open(run.log(name), "ab")  # a resumed run's attempts follow each other in one log
        is_controller = name == wiring.CONTROLLER
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "srl_hpc.worker", "--run-dir", str(run.root), "--task-id", str(task_id)],
            stdout=subprocess.PIPE if is_controller else log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        if is_controller:
            threading.Thread(target=_tee, args=(procs[name].stdout, out, log), daemon=True).start()
        else:
            log.close()

    interrupted: list[int] = []

    def on_signal(signum, _frame) -> None:
        if interrupted:  # a second Ctrl-C: no more patience
            _signal_all(procs, signal.SIGKILL)
        interrupted.append(signum)
        print(
            f"\n{signal.Signals(signum).name}: stopping the run (checkpoint kept); again to kill", file=out, flush=True
        )
        _signal_all(procs, signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        crashed = _watch(procs, run, exp.curve)
        _wind_down(procs, run)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        run.launcher_pid.unlink(missing_ok=True)

    if crashed:
        name, code = crashed
        print(
            f"worker {name} {describe_exit(code)}; last lines of {run.log(name)}:\n{tail(run.log(name))}",
            file=out,
            flush=True,
        )
        return 1
    code = procs[wiring.CONTROLLER].returncode
    if code == 1:
        for name in _summary(run).get("failed_workers", {}):
            print(f"last lines of {run.log(name)}:\n{tail(run.log(name))}", file=out, flush=True)
    if interrupted:
        return 128 + interrupted[0]
    return code if code in (0, 1) else 1


def launcher_pid(run: RunDir) -> int | None:
    """The pid of the local launcher still running this run, if any."""
    try:
        pid = int(run.launcher_pid.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _report_to_controller(run: RunDir, worker: str, error: str, curve: bool) -> bool:
    """Send a 'failed' event on the worker's behalf, as the worker itself would. False: no controller yet."""
    try:
        entry = json.loads(run.rendezvous_entry(wiring.CONTROLLER).read_text())
    except (OSError, ValueError):
        return False
    address = endpoints.address({wiring.CONTROLLER: entry}, wiring.CONTROLLER, endpoints.EVENTS)
    control.send_once(run, curve, address, "failed", {"worker": worker, "error": error})
    return True


def _watch(procs, run: RunDir, curve: bool) -> tuple[str, int] | None:
    """Until the controller exits. A worker that dies with an error is returned (and the run stopped)."""
    controller = procs[wiring.CONTROLLER]
    crashed, signalled_at = None, None
    while controller.poll() is None:
        for name, p in procs.items():
            code = p.poll()
            if crashed is None and code not in (None, 0) and name != wiring.CONTROLLER and name not in _lost(run):
                crashed = (name, code)
                # A worker that raised has told the controller itself; one that was killed cannot, so the
                # launcher tells it. The controller then stops the run (failed) without waiting for it.
                told = _report_to_controller(run, name, f"process {describe_exit(code)}", curve)
                signalled_at = time.monotonic() + (REPORT_WAIT if told else 0.0)
        if signalled_at is not None and time.monotonic() >= signalled_at:
            _signal_all(procs, signal.SIGTERM)
            signalled_at = float("inf")
        time.sleep(0.1)
    if controller.returncode not in (0, 1, 143) and crashed is None:
        crashed = (wiring.CONTROLLER, controller.returncode)
    return crashed


def _lost(run: RunDir) -> list[str]:
    """The workers the controller goes on without (its saved state): their processes may end without harm."""
    try:
        return list(json.loads(run.controller_state.read_text())["lost"])
    except (OSError, ValueError, KeyError):
        return []


def _wind_down(procs, run: RunDir) -> None:
    deadline = time.monotonic() + GRACE
    for p in procs.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    _signal_all(procs, signal.SIGKILL)
    for p in procs.values():
        p.wait()
    remove_run_segments(run.root)  # shared memory a worker killed mid-run could not remove itself


def _signal_all(procs, sig) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(sig)


def _tee(pipe, out, log) -> None:
    for line in iter(pipe.readline, b""):
        out.write(line.decode(errors="replace"))
        out.flush()
        log.write(line)
        log.flush()
    log.close()


def _summary(run: RunDir) -> dict:
    try:
        return json.loads(run.summary.read_text())
    except (OSError, ValueError):
        return {}


def main(argv=None) -> int:
    """`python -m launcher.local RUN_DIR`: run an already created run directory (used by launcher.submit)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launcher.local RUN_DIR", file=sys.stderr)
        return 2
    run_dir = RunDir(Path(args[0]).resolve())
    return run(config.load(run_dir.experiment), run_dir)


if __name__ == "__main__":
    sys.exit(main())
