"""The one generic worker, and the entry point of every worker process, local or Slurm:
`python -m srl_hpc.worker --run-dir D --task-id N`.

Task N hosts worker N of the run's graph (srl_hpc.graph). The worker owns what every role shares:
the ZMQ context, the control channel to the controller (heartbeats up, commands down), the trace, the
signals and the main loop; its task handlers (srl_hpc.handlers) do the rest. Under Slurm the task id
defaults to SLURM_PROCID and rendezvous goes through MPI; locally through files in the run directory.
A restartable worker (an actor) runs as the child of a supervisor in its task's process
(srl_hpc.worker.supervisor), which does the rendezvous and replaces the worker if it dies or hangs.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import cast

import zmq

from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.handlers import POLL_MS, handler_class
from srl_hpc.rundir import RunDir, redirect_output, task_id_of
from srl_hpc.services import limits, network
from srl_hpc.services.rendezvous import FileBarrier, FileRendezvous, MpiRendezvous
from srl_hpc.streams import endpoints
from srl_hpc.streams.control import ControlClient, report_interval
from srl_hpc.streams.security import PrivateContext
from srl_hpc.trace.writer import TraceWriter
from srl_hpc.worker.supervisor import ChildLink, Supervisor

HEARTBEAT_INTERVAL = 1.0
COMMANDS_INTERVAL = 0.01  # seconds between looks for the controller's commands (a busy loop turns ~3,000/s)
EXIT_LINGER_MS = 5000  # at close: the longest a socket that sets no LINGER of its own keeps unsent messages


def rss_mb() -> float:
    """Resident memory of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included)."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


class ControllerSilent(RuntimeError):
    """The controller has gone quiet: the run is over for this worker (it ended, or this host was cut off from
    it). Its supervisor takes this as the worker's end, not a death to replace: a replacement would hear nothing
    either."""


class Worker:
    def __init__(
        self,
        exp,
        graph: wiring.Graph,
        name: str,
        run_dir,
        slurm: bool = False,
        incarnation: int = 0,
        link: ChildLink | None = None,
        ports: dict[str, int] | None = None,
        kept: dict | None = None,
    ) -> None:
        self.exp = exp
        self.graph = graph
        self.name = name
        self.node = graph.worker(name)
        self.run_dir = RunDir(run_dir)
        local_id = int(os.environ["SLURM_LOCALID"]) if slurm else None  # this task's index on its node
        self.gpu_index = graph.gpu_index(name, local_id)  # used by a handler on device "cuda"
        self.may_share_gpu = not slurm or getattr(exp.slurm, self.node.group).share_gpu
        self.attempt = self.run_dir.attempt  # > 1: a resumed run (the trainer loads its checkpoint)
        self.incarnation = incarnation  # > 0: the replacement of a worker that died or hung (srl_hpc.worker.supervisor)
        self.link = link
        self.ports = ports or {}  # a replacement binds its predecessor's ports: its peers know those
        self.kept = kept or {}  # what its predecessor kept for it (keep())
        # a resumed attempt and a replacement draw new episodes
        self.seed = exp.seed + 1_000 * (self.attempt - 1) + 1_000_000 * incarnation
        # every socket speaks CURVE with the run's keys (or none does: curve false, for a benchmark)
        self.ctx = PrivateContext(self.run_dir) if exp.curve else zmq.Context()
        # Each stream sets its sockets' LINGER, which close honours: 5 s where an unsent message must still
        # arrive (the final report, the last segments), 0 where it is worthless then (credits, parameters,
        # inference, commands). A socket that sets none gets this bound, not libzmq's wait forever
        self.ctx.setsockopt(zmq.LINGER, EXIT_LINGER_MS)
        self.trace = TraceWriter(self.run_dir.trace(name, self.attempt, incarnation), name, enabled=exp.monitor.trace)
        self.stop_requested = False
        self.finish_requested = False  # the controller's second phase: sample consumers may end
        self.control: ControlClient | None = None
        self._last_heartbeat = self._last_report = 0.0
        self.report_interval = report_interval(len(graph.names))
        self._controller_heard = time.monotonic()
        self._commands_read = float("-inf")
        self.lost_peers: frozenset[str] = frozenset()  # workers the run goes on without (the controller's pings)
        self._threads: list[threading.Thread] = []
        self._threads_stop = threading.Event()
        self._thread_error: BaseException | None = None
        self.handlers = {}
        for kind in self.node.handlers:  # in order: a handler may use those built before it
            self.handlers[kind] = handler_class(kind)(self)

    # -- lifecycle, called by main() in this order
    def bind(self) -> dict[str, int]:
        ports = {}
        for handler in self.handlers.values():
            ports.update(handler.bind())
        if self.ports and ports != self.ports:  # a handler of a restartable kind ignored its predecessor's ports
            raise RuntimeError(f"{self.name} bound {ports}, not its predecessor's {self.ports}")
        return ports

    def record_startup(self, start_cost: dict) -> None:
        """Start-up cost up to 'ready to rendezvous' (imports, envs, models, sockets): wall time, CPU time
        (what hundreds of workers starting on a few cores queue for) and memory then, the CPUs it may run on
        (Slurm's binding) and its torch threads; `start_cost`: the rendezvous' own share of it (MPI_Init's
        seconds and CPU)."""
        torch = sys.modules.get("torch")  # (only workers that run a model import it)
        self.trace.record(
            "startup",
            seconds=process_age(),
            cpu_seconds=time.process_time(),
            rss_mb=rss_mb(),
            cpus_allowed=len(os.sched_getaffinity(0)),
            torch_threads=torch.get_num_threads() if torch else 0,
            **start_cost,
        )

    def connect(self, table: dict) -> None:
        if self.name != wiring.CONTROLLER:
            self.control = ControlClient(self.ctx, table, wiring.CONTROLLER)
            self._controller_heard = time.monotonic()
        for handler in self.handlers.values():
            handler.connect(table)

    def run(self) -> int:
        """Start the handlers, loop until stopped, wind down, report. Returns the process exit code."""
        for handler in self.handlers.values():
            handler.start()
        main, *others = [h for h in self.handlers.values() if h.active]
        for handler in others:
            thread = threading.Thread(target=self._poll_forever, args=(handler,), name=handler.kind, daemon=True)
            thread.start()
            self._threads.append(thread)
        while main.keep_running(self.stop_requested):
            self.poll_commands()
            main.poll(POLL_MS)
            self.maybe_heartbeat()
        self._threads_stop.set()
        for thread in self._threads:
            thread.join()
        for handler in self.handlers.values():
            handler.finish()
        self.send_event("final", self.stats())
        if self.link is not None:
            self.link.concluded()
        return getattr(main, "exit_code", 0)

    def close(self) -> None:
        for handler in self.handlers.values():
            handler.close()
        self.trace.close()
        self.ctx.destroy()  # each socket's own LINGER

    # -- what handlers use
    def keep(self, **state) -> None:
        """Leave `state` to a replacement of this worker (its `kept`), should this one die; nothing unsupervised."""
        if self.link is not None:
            self.link.keep(state)

    def request_stop(self) -> None:
        self.stop_requested = True

    def poll_commands(self) -> None:
        """Obey the controller's broadcasts; if it has gone silent, the run is over (its process died).
        Also surfaces an error of a handler thread."""
        if self._thread_error is not None:
            raise RuntimeError(f"a handler thread of {self.name} failed") from self._thread_error
        now = time.monotonic()
        if self.control is None or now - self._commands_read < COMMANDS_INTERVAL:
            return
        self._commands_read = now
        messages = self.control.pending_commands()
        commands = [m.kind for m in messages]
        if commands:
            self._controller_heard = now
        if "stop" in commands:
            self.stop_requested = True
        if "finish" in commands:
            self.stop_requested = self.finish_requested = True
        pings = [m for m in messages if m.kind == "ping"]
        lost = frozenset(pings[-1].meta.get("lost", ())) if pings else self.lost_peers
        if lost != self.lost_peers:
            self.lost_peers = lost
            for handler in self.handlers.values():
                handler.peers_lost(lost)
        silence = now - self._controller_heard
        if silence > self.exp.monitor.heartbeat_timeout:
            raise ControllerSilent(f"no word from the controller for {silence:.0f}s; stopping")

    def maybe_heartbeat(self, interval: float | None = None) -> None:
        """Every second a trace row and a beat to the supervisor; every `interval` (default: the run's
        report interval, control.report_interval) the counters to the controller."""
        now = time.monotonic()
        beat = now - self._last_heartbeat >= HEARTBEAT_INTERVAL
        report = now - self._last_report >= (interval or self.report_interval)
        if not (beat or report):
            return
        depths = {}
        for handler in self.handlers.values():
            depths.update(handler.queue_depths())
        if beat:
            self._last_heartbeat = now
            self.trace.record(
                "heartbeat",
                rss_mb=rss_mb(),
                cpu_seconds=time.process_time(),
                open_files=len(os.listdir("/proc/self/fd")),
                **depths,
            )
            self.trace.flush_if_due()
            if self.link is not None:
                self.link.beat()
        if report:
            self._last_report = now
            self.send_event("heartbeat", {**self.stats(), "queues": depths})

    def stats(self) -> dict:
        merged = {"incarnation": self.incarnation}  # the controller keeps a lost incarnation's counters
        if isinstance(self.ctx, PrivateContext):
            merged["handshakes_refused"] = self.ctx.handshakes_refused()
        for handler in self.handlers.values():
            merged.update(handler.stats())
        return merged

    def send_event(self, kind: str, meta: dict) -> None:
        if self.control is not None:
            self.control.send(kind, {"worker": self.name, **meta})

    def report_failure(self, exc: BaseException) -> None:
        """Tell the controller which worker failed and why (best effort: it may be the controller that is gone).
        A supervised worker tells its supervisor, which replaces it or reports it failed."""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if self.link is not None:
            self.link.report_error(error)
        else:
            self.send_event("failed", {"error": error, "traceback": traceback.format_exc()[-4000:]})

    def _poll_forever(self, handler) -> None:
        try:
            while not self._threads_stop.is_set():
                handler.poll(POLL_MS)
        except BaseException as e:  # surfaced by poll_commands() on the main thread
            self._thread_error = e


EXIT_GRACE = 30.0  # seconds a process may take to exit once its worker's run is over


def bound_exit(seconds: float = EXIT_GRACE) -> None:
    """From here on the process exits within `seconds`; past them every thread's stack goes to its log (where
    the exit hung) and it ends with code 1. Under Slurm nothing else bounds a process stuck in its teardown
    (closing sockets, MPI_Finalize, which waits for every rank, a supervised child): it would hold the whole
    job until the time limit. (The local launcher kills stragglers itself, after its own grace.)"""
    faulthandler.dump_traceback_later(seconds, exit=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m srl_hpc.worker", description=__doc__)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--task-id", type=int, default=None, help="default: $SLURM_PROCID (+ --first-task)")
    parser.add_argument(
        "--first-task",
        type=int,
        default=None,
        metavar="K",
        help="slurm.layout: jobs: this group's job runs workers K, K+1, ...: the task id is K + "
        "$SLURM_PROCID, since each group's srun counts its tasks from 0",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="started by srun: the address from slurm.network, the GPU from $SLURM_LOCALID",
    )
    parser.add_argument("--rendezvous", choices=("file", "mpi"), default="file")
    parser.add_argument("--log-dir", type=Path, help="send this worker's output to LOG_DIR/<worker>.log")
    child = parser.add_argument_group("a supervised worker (started by srl_hpc.worker.supervisor, not by hand)")
    child.add_argument("--supervised", metavar="UP,DOWN", help="the pipe fds to its supervisor")
    child.add_argument("--incarnation", type=int, default=0)
    child.add_argument("--ports", type=json.loads, default={}, help="JSON: bind these (a predecessor's ports)")
    child.add_argument("--kept", type=json.loads, default={}, help="JSON: what its predecessor kept (Worker.keep)")
    args = parser.parse_args(argv)
    # submitit's time-limit signal reaches every process of a sweep member's Slurm step: the member's
    # launcher acts on it (launcher.sweep), a worker must not die of it
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    task_id = task_id_of(args, os.environ)

    run_dir = RunDir(args.run_dir)
    exp = config.load(run_dir.experiment)
    graph = wiring.build(exp)
    name = graph.names[task_id]
    if args.log_dir:
        redirect_output(RunDir(args.run_dir).log(name))
    if run_dir.attempt > 1 and not args.supervised:  # attempts of a resumed run follow each other in one log
        print(f"==== attempt {run_dir.attempt}", flush=True)
    if args.incarnation:  # so do a restarted worker's incarnations
        print(f"==== restart {args.incarnation}", flush=True)
    faulthandler.enable()  # a crash in native code (MPI, torch, an env) leaves the Python stack in the log
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    log = logging.getLogger("srl_hpc.worker")

    try:
        # Servers hold a descriptor per client; clusters often set a soft limit far under the hard one
        limits.raise_open_files(limits.descriptors_needed(graph, name), name, len(graph.names))
        address = _address(exp, name, args.slurm, spans_jobs=args.first_task is not None)
    except (limits.LimitError, network.NetworkError) as e:
        print(e, flush=True)
        if args.slurm and not args.supervised:  # the others stop waiting for this worker: under MPI, once it has
            _rendezvous(args, run_dir, graph, name).abandon()  # joined MPI_Init's fence, where they wait first
        return 1
    os.environ.update(network.library_environment(address))  # before MPI, gloo or NCCL start
    endpoints.configure(address.ip, config.parse_ports(exp.slurm.ports) if args.slurm else None)

    rendezvous: ChildLink | FileRendezvous | MpiRendezvous
    if args.supervised:
        rendezvous = ChildLink(args.supervised)
    else:
        rendezvous = _rendezvous(args, run_dir, graph, name)
        budget = wiring.restart_budget(exp, name)
        if budget is not None:
            try:
                return Supervisor(exp, graph.names, run_dir, task_id, rendezvous, budget, args.slurm).run()
            finally:  # its rendezvous may fail too
                bound_exit()
    log.info("address %s", address.describe())  # (once: a supervisor's child says it)
    # Before torch loads: idle OpenMP threads sleep instead of spinning, so a trainer's threads do not
    # steal the cores its actors and policy workers share with it. A user's setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    worker = None
    try:
        worker = Worker(
            exp,
            graph,
            name,
            args.run_dir,
            slurm=args.slurm,
            incarnation=args.incarnation,
            link=cast(ChildLink, rendezvous) if args.supervised else None,
            ports=args.ports,
            kept=args.kept,
        )
        ports = worker.bind()
        worker.record_startup(getattr(rendezvous, "start_cost", {}))  # (only MPI has a start of its own)
        entry = {
            "worker": name,
            "host": address.ip,
            "interface": address.interface,
            "address_from": address.source,
            "ports": ports,
            "pid": os.getpid(),
            "node": os.environ.get("SLURMD_NODENAME", os.uname().nodename),
        }
        waited, cpu = time.monotonic(), time.process_time()
        table = rendezvous.exchange(entry, graph.names)  # a signal until here ends the process at once
        # The CPU a rank spends waiting for the others (the barrier's looks, the allgather) is taken from those
        # still starting; MPI_Init's share of the wait is in the startup row.
        worker.trace.record(
            "rendezvous", seconds=time.monotonic() - waited, cpu_seconds=time.process_time() - cpu, workers=len(table)
        )
        # From now on SIGTERM (scancel, the local launcher) and SIGINT wind down cleanly, keeping checkpoints.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: worker.request_stop())
        log.info("rendezvous done: %d workers", len(table))
        if name == wiring.CONTROLLER:  # where every worker runs, for status and post-mortems
            run_dir.workers.write_text(json.dumps(table, indent=1))
        worker.connect(table)
        code = worker.run()
        log.info("%s ended", name)
        return code
    except Exception as exc:  # noqa: BLE001  any failure is reported with the worker's name
        traceback.print_exc()
        if worker is not None:  # one that failed while being built has no one to tell yet
            worker.report_failure(exc)
            if isinstance(exc, ControllerSilent) and worker.link is not None:
                worker.link.concluded()
        return 1
    finally:
        bound_exit()
        if worker is not None:
            worker.close()


def _rendezvous(
    args: argparse.Namespace, run_dir: RunDir, graph: wiring.Graph, name: str
) -> FileRendezvous | MpiRendezvous:
    """How this task meets the others: files in local mode; under Slurm a barrier of files, then MPI (which
    starts here) or the files."""
    if not args.slurm:
        return FileRendezvous(run_dir, len(graph.names))
    barrier = FileBarrier(run_dir, graph.names, name)
    if args.rendezvous == "mpi":
        return MpiRendezvous(barrier)
    return FileRendezvous(run_dir, len(graph.names), barrier=barrier)


def _address(exp, name: str, slurm: bool, spans_jobs: bool = False) -> network.Address:
    """The address this worker binds and advertises; under Slurm, a loopback one only if the job has one node
    or slurm.network names it (the local Slurm's nodes sharing one host). A run of several jobs (spans_jobs:
    slurm.layout: jobs) may span nodes whatever its job's own count."""
    if not slurm:
        return network.LOCAL
    address = network.resolve(exp.slurm.network)
    nodes = int(os.environ.get("SLURM_STEP_NUM_NODES", os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    if address.loopback and exp.slurm.network is None and (nodes > 1 or spans_jobs):
        raise network.NetworkError(network.loopback_message(name, address))
    return address
