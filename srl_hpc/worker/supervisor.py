"""Workers that come back: the process started for a restartable task supervises the worker it runs.

A Slurm task cannot be respawned inside its job step, so the task's own process does it, the same way locally
and under Slurm. For a restartable worker (srl_hpc.graph.restart_budget: any but trainers that train in
lockstep), `python -m srl_hpc.worker` becomes a small supervisor that does the task's rendezvous
once (MPI or files) and runs the worker as a child process. A child that dies (an error, a kill) or hangs
(alive, but no heartbeat for half the monitor's heartbeat_timeout) is replaced by a new incarnation that gets
the same rendezvous table and binds the ports its predecessor bound (so every peer reaches it at the address it
already has), up to `workers.<kind>.max_restarts` times; past that budget the supervisor tells the controller
the worker failed and why, and the run stops cleanly. The controller hears of each restart too (it keeps the
lost incarnation's counters); a replaced controller learns of its own from what its supervisor kept for it.

Child and supervisor talk over two pipes, one JSON line at a time: the child's rendezvous entry up and the table
down (ChildLink stands in for the rendezvous inside the child), then a line per heartbeat, what the child keeps
for a replacement (a trainer's last published version), and the child's error if it fails or word that its run
is over (its exit code is then the worker's verdict, not a death). MPI lives in the
supervisor, so killing a child never touches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback

from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir
from srl_hpc.streams import control, endpoints
from srl_hpc.streams.shm import remove_segment, shm_name


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies, so none outlives a run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ChildLink:
    """The child's end of the pipes: its rendezvous, its heartbeats and its last words to the supervisor."""

    def __init__(self, fds: str) -> None:
        up, down = (int(fd) for fd in fds.split(","))
        self.up = os.fdopen(up, "w", buffering=1)
        self.down = os.fdopen(down, "r")

    def exchange(self, entry: dict, expected: list[str]) -> dict:
        self._say({"entry": entry})
        line = self.down.readline()
        if not line:
            raise RuntimeError("the supervisor went away before rendezvous")
        return json.loads(line)

    def beat(self) -> None:
        self._say({"beat": 1})

    def keep(self, state: dict) -> None:
        self._say({"keep": state})

    def report_error(self, error: str) -> None:
        self._say({"error": error})

    def concluded(self) -> None:
        """The worker's run is over as it should be, whatever its exit code (a controller's 1: the run failed)."""
        self._say({"concluded": 1})

    def _say(self, message: dict) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):  # the supervisor is gone: this process dies with it
            self.up.write(json.dumps(message) + "\n")


class Supervisor:
    def __init__(
        self, exp, names: list[str], run_dir: RunDir, task_id: int, rendezvous, budget: int, slurm: bool
    ) -> None:
        self.exp = exp
        self.names = names  # every worker of the run's graph, in task order
        self.run_dir = run_dir
        self.task_id = task_id
        self.name = names[task_id]
        self.rendezvous = rendezvous
        self.budget = budget
        self.slurm = slurm  # its children are started by srun too, as far as they can tell
        self.hang_timeout = exp.monitor.heartbeat_timeout / 2  # the controller, at the full timeout, is later
        self.table: dict | None = None
        self.kept: dict = {}  # what the incarnations kept for their replacements, merged
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.concluded = False  # the child said its run is over: its exit is not a death to replace

    def run(self) -> int:
        """Run incarnations until one ends cleanly, the run is stopped, or the budget is spent."""
        incarnation = 0
        while True:
            code, why = self._run_child(incarnation)
            if code == 0 or self.stopping or self.concluded:
                return code
            if self.table is None or incarnation >= self.budget:
                spent = f" (restart budget of {self.budget} spent)" if self.table is not None else ""
                self._tell_controller("failed", {"error": f"{why}{spent}"})
                return 1
            incarnation += 1
            remove_segment(shm_name(self.run_dir.root, self.name, incarnation - 1))  # a killed child's
            print(f"{self.name} {why}; restarting it ({incarnation} of {self.budget})", flush=True)
            if self.name == wiring.CONTROLLER:  # no controller to tell: its replacement is told instead
                self.kept.setdefault("restarted", []).append(why)
            else:
                self._tell_controller("restarting", {"error": why, "restarts": incarnation})

    def _run_child(self, incarnation: int) -> tuple[int, str]:
        """One incarnation, from start to exit. Returns (exit code, why it ended)."""
        up_read, up_write = os.pipe()
        down_read, down_write = os.pipe()
        ports = self.table[self.name]["ports"] if self.table is not None else {}  # the predecessor's
        self.child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "srl_hpc.worker",
                "--run-dir",
                str(self.run_dir.root),
                "--task-id",
                str(self.task_id),
                *(["--slurm"] if self.slurm else []),
                "--incarnation",
                str(incarnation),
                "--supervised",
                f"{up_write},{down_read}",
                *([f"--ports={json.dumps(ports)}"] if ports else []),
                *([f"--kept={json.dumps(self.kept)}"] if self.kept else []),
            ],
            pass_fds=(up_write, down_read),
            preexec_fn=die_with_parent,
        )
        os.close(up_write)
        os.close(down_read)
        # a replacement's clock runs from its start: one that hangs before it has bound its ports is replaced
        # too (the first incarnation's start is the rendezvous' to time)
        error, pending = None, b""
        last_beat = time.monotonic() if incarnation > 0 else None
        try:
            while True:
                code = self.child.poll()  # first: all it wrote before it exited is then in the pipe, read below
                ready, _, _ = select.select([up_read], [], [], 0.5 if code is None else 0)
                data = os.read(up_read, 65536) if ready else b""
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    message = json.loads(line)
                    if "entry" in message:
                        table = (json.dumps(self._table(message["entry"])) + "\n").encode()
                        with contextlib.suppress(BrokenPipeError):  # it died meanwhile: its exit says so below
                            os.write(down_write, table)
                        last_beat = time.monotonic()
                    elif "beat" in message:
                        last_beat = time.monotonic()
                    elif "keep" in message:
                        self.kept.update(message["keep"])
                        last_beat = time.monotonic()
                    elif "error" in message:
                        error = message["error"]
                    elif "concluded" in message:
                        self.concluded = True
                if code is not None and not data:
                    return code, error or describe_exit(code)
                if code is not None:  # more of its last words may wait in the pipe
                    continue
                if ready and not data:  # the child closed its end but lives on: wait for its exit
                    self.child.wait()
                    continue
                if last_beat is not None and not self.stopping and time.monotonic() - last_beat > self.hang_timeout:
                    self.child.kill()
                    self.child.wait()
                    return -signal.SIGKILL, f"sent no heartbeat for {self.hang_timeout:.0f}s (hung)"
        finally:
            os.close(up_read)
            os.close(down_write)

    def _table(self, entry: dict) -> dict:
        """The task's rendezvous, done once: a later incarnation gets the same table, with its own pid."""
        if self.table is None:
            self.table = self.rendezvous.exchange(entry, self.names)
            for sig in (signal.SIGTERM, signal.SIGINT):  # from now on: pass the stop on, restart no more
                signal.signal(sig, self._on_signal)
        self.table[self.name] = entry
        return self.table

    def _on_signal(self, signum, _frame) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def _tell_controller(self, kind: str, meta: dict) -> None:
        if self.table is None or self.name == wiring.CONTROLLER:  # before rendezvous there is none to tell
            return
        try:
            control.send_once(
                self.run_dir,
                self.exp.curve,
                endpoints.address(self.table, wiring.CONTROLLER, endpoints.EVENTS),
                kind,
                {"worker": self.name, **meta},
            )
        except Exception:  # noqa: BLE001  best effort: the controller may be gone too
            traceback.print_exc()
