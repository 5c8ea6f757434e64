"""Chaos: a run that must reach its target while a seeded schedule kills or freezes one of its workers every
few seconds, beside the same run left alone, in one invocation.

    python benchmarks/chaos.py experiments/cartpole_ppo.yaml --every 10 --seed 1
    python benchmarks/chaos.py experiments/cartpole_dqn.yaml --every 8 --kinds actor,buffer,trainer --signals kill

Every --every seconds (from the workers' rendezvous on) the schedule draws a worker of one of --kinds that is
running now and sends it one of --signals: SIGKILL (a crash) or SIGSTOP (a hang: alive and silent, which its
supervisor finds after half of monitor.heartbeat_timeout and replaces). Only workers that are replaced are
drawn (srl_hpc.graph.restart_budget): trainers in lockstep are not. Budgets are raised so that
the schedule cannot spend them (workers.<kind>.max_restarts = --budget) and monitor.heartbeat_timeout is
--heartbeat-timeout, so that a hang is found in half of it.

For each run it prints whether the target was reached, the wall time, the faults sent and the restarts the
run recorded, the frames lost with replaced workers and the frame accounting, and whether it adds up exactly
(every frame sent consumed, dropped or lost with a replaced receiver, once), then the same frames as the
workers' traces record them and whether the two records agree (a killed trainer's trace ends at its last
flush: they then differ by what it received after it); the last line is JSON.

With --slurm the runs go to the project's namespaced local Slurm (scripts/local_slurm.sh start; the profile is
clusters/local.yaml unless --profile says otherwise), whose hosts are namespaces of this machine, so that the
schedule still finds every worker's process. --lose-host-at T also takes one host away T seconds into the run
under chaos (`local_slurm.sh lose HOST --down`: every process of it SIGKILLed, the node DOWN at once): the host
of the last actor, which the local profile gives to actors only. Under `slurm.layout: jobs` with actors on two
or more nodes the run goes on without that host's actors; as a het job it is requeued and resumes from its
checkpoint (docs/concepts.md, "What survives what"). The host comes back (`local_slurm.sh start`) at the end.

    python benchmarks/chaos.py experiments/cartpole_ppo.yaml --slurm --lose-host-at 20 --every 10 \\
        --set slurm.layout=jobs --set workers.actor.count=4 --set slurm.actor.sbatch_options=[--exclusive]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import launcher
from launcher import local, runs
from launcher.settings import profile_files
from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir
from srl_hpc.trace import accounting, reader

LOCAL_SLURM = Path(__file__).resolve().parent.parent / "scripts" / "local_slurm.sh"
LOCAL_PROFILE = Path(__file__).resolve().parent.parent / "clusters" / "local.yaml"

SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def supervised_children(run_root: Path, names: list[str]) -> dict[str, int]:
    """The pid of the process that runs each supervised worker of the run now (its supervisor's child)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "srl_hpc.worker" not in args or "--supervised" not in args or str(run_root) not in args:
            continue
        found[names[int(args[args.index("--task-id") + 1])]] = int(entry.name)
    return found


class Schedule(threading.Thread):
    """Sends a drawn signal to a drawn worker every `every` seconds until the run ends."""

    def __init__(self, run_root: Path, names: list[str], kinds: list[str], signals: list[str], every: float, seed: int):
        super().__init__(daemon=True)
        self.run_root, self.names, self.kinds, self.signals = run_root, names, kinds, signals
        self.every, self.rng = every, random.Random(seed)
        self.faults: list[dict] = []
        self.done = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        # from the rendezvous on (the controller writes where every worker runs): a worker lost before it is
        # a failure to start, which no supervisor retries
        while not RunDir(self.run_root).workers.exists():
            if self.done.wait(0.1):
                return
        self.t0 = time.monotonic()
        while not self.done.wait(self.every):
            live = {
                w: pid
                for w, pid in supervised_children(self.run_root, self.names).items()
                if w.split("/")[0] in self.kinds
            }
            if not live:
                continue
            worker = self.rng.choice(sorted(live))
            how = self.rng.choice(self.signals)
            try:
                os.kill(live[worker], SIGNALS[how])
            except ProcessLookupError:  # it ended meanwhile
                continue
            self.faults.append({"at": round(time.monotonic() - self.t0, 1), "worker": worker, "signal": how})
            print(f"  chaos: {how} {worker} at {self.faults[-1]['at']}s", flush=True)


class HostLoss(threading.Thread):
    """Takes the host of the run's last actor away `at` seconds after the rendezvous (local Slurm only)."""

    def __init__(self, run_root: Path, at: float) -> None:
        super().__init__(daemon=True)
        self.run_root, self.at = run_root, at
        self.lost: dict = {}
        self.done = threading.Event()

    def run(self) -> None:
        workers = RunDir(self.run_root).workers
        while not workers.exists():
            if self.done.wait(0.1):
                return
        if self.done.wait(self.at):
            return
        table = json.loads(workers.read_text())
        actors = sorted((w for w in table if w.startswith("actor/")), key=lambda w: int(w.split("/")[1]))
        host = table[actors[-1]]["node"]
        held = sorted(w for w, where in table.items() if where["node"] == host)
        subprocess.run(["bash", str(LOCAL_SLURM), "lose", host, "--down"], check=True, timeout=60)
        self.lost = {"at": self.at, "host": host, "workers": held}
        print(f"  chaos: host {host} lost at {self.at}s, with {', '.join(held)}", flush=True)


def start_schedule(exp: config.Experiment, run_root: Path, chaos: dict) -> Schedule:
    names = wiring.build(exp).names
    kinds = [k for k in chaos["kinds"] if any(wiring.restart_budget(exp, n) and n.startswith(k + "/") for n in names)]
    schedule = Schedule(run_root, names, kinds, chaos["signals"], chaos["every"], chaos["seed"])
    schedule.start()
    return schedule


def one_run(exp: config.Experiment, out: Path, label: str, chaos: dict | None) -> dict:
    exp, run = runs.create(exp, out / label)
    schedule = None if chaos is None else start_schedule(exp, run.root, chaos)
    t0 = time.monotonic()
    code = local.run(exp, run, out=io.StringIO())
    if schedule is not None:
        schedule.done.set()
    return result(label, code, run.root, schedule, t0)


def one_slurm_run(exp: config.Experiment, out: Path, label: str, chaos: dict | None, lose_at: float | None) -> dict:
    """The run as a job of the local Slurm, followed to its end; the lost host, if any, back afterwards."""
    run = launcher.submit(exp, slurm=True, run_dir=out / label)
    print(f"  {label}: job {run.job_id}, run directory {run.run_dir}", flush=True)
    schedule = None if chaos is None else start_schedule(exp, run.run_dir, chaos)
    loss = None if lose_at is None or chaos is None else HostLoss(run.run_dir, lose_at)
    if loss is not None:
        loss.start()
    t0 = time.monotonic()
    try:
        state = run.wait(timeout=3600)
    finally:
        for thread in (schedule, loss):
            if thread is not None:
                thread.done.set()
        if loss is not None and loss.lost:
            subprocess.run(["bash", str(LOCAL_SLURM), "start"], check=True, timeout=300)
    r = result(label, 0 if state == "completed" else 1, run.run_dir, schedule, t0)
    return {**r, "job_state": state, "host_lost": loss.lost if loss is not None else {}}


def result(label: str, code: int, run_root: Path, schedule: Schedule | None, t0: float) -> dict:
    run = RunDir(run_root)
    summary = json.loads(run.summary.read_text()) if run.summary.exists() else {}
    return {
        "run": label,
        "exit_code": code,
        "reached": summary.get("reason", "").startswith("target reached"),
        "reason": summary.get("reason"),
        "wall_time": summary.get("wall_time"),
        "launcher_seconds": round(time.monotonic() - t0, 1),
        "env_frames": summary.get("env_frames"),
        "faults": schedule.faults if schedule else [],
        "restarts": {w: len(r) for w, r in summary.get("restarts", {}).items()},
        "failed_workers": summary.get("failed_workers"),
        "lost_workers": sorted(summary.get("lost_workers", {})),
        "attempt": summary.get("attempt"),
        **{
            k: summary.get(k)
            for k in (
                "frames_sent",
                "frames_sent_counted_at_receivers",
                "frames_received",
                "frames_consumed",
                "frames_dropped",
                "frames_lost_with_replaced_workers",
                "frames_in_flight_lost",
            )
        },
        "requests_resent": summary.get("counters", {}).get("requests_resent"),
        "accounting_exact": exact(summary),
        "traces": traced(run_root),
        "run_dir": str(run_root),
    }


def traced(run_root: Path) -> dict | None:
    """The frames as the workers' traces record them (srl-trace's accounting, a record apart from the counters in
    summary.json, and held against them); None without traces."""
    try:
        frames = accounting.frame_accounting(reader.read_run(run_root))
    except reader.TraceError:
        return None
    if frames is not None:
        frames.pop("by_actor")
    return frames


def exact(summary: dict) -> bool:
    """Every frame sent was consumed, dropped, or lost with a replaced receiver (what it held at its last
    report, and what reached it after), each counted once."""
    keys = ("frames_consumed", "frames_dropped", "frames_lost_with_replaced_workers", "frames_in_flight_lost")
    if any(summary.get(k) is None for k in ("frames_sent", "frames_received", *keys)):
        return False
    held = summary["frames_received"] - summary["frames_consumed"] - summary["frames_dropped"]
    return held == summary["frames_lost_with_replaced_workers"] and summary["frames_sent"] == sum(
        summary[k] for k in keys
    )


def traces_line(t: dict | None) -> str:
    if t is None:
        return "; no traces"
    line = f"; traces: sent {t['sent']:,}, received {t['received']:,}"
    if t["consumed"] is not None:
        line += f" = trained {t['consumed']:,} + dropped {t['dropped']:,}"
    if t["checked_against_summary"] and not any("summary.json" in m for m in t["mismatches"]):
        line += ", as counted"
    if t["incomplete"]:
        line += f" (the traces of {', '.join(t['incomplete'])} end at their last flush: killed)"
    return line + "".join(f"; MISMATCH {m}" for m in t["mismatches"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--every", type=float, default=10.0, help="seconds between faults (default 10)")
    p.add_argument("--seed", type=int, default=1, help="of the schedule (default 1)")
    p.add_argument("--kinds", default=",".join(wiring.RESTARTABLE), help="worker kinds drawn from")
    p.add_argument("--signals", default="kill,stop", help="drawn from: kill (SIGKILL), stop (SIGSTOP)")
    p.add_argument("--budget", type=int, default=100, help="workers.<kind>.max_restarts of each kind (default 100)")
    p.add_argument("--heartbeat-timeout", type=float, default=20.0, help="monitor.heartbeat_timeout (default 20)")
    p.add_argument("--no-baseline", action="store_true", help="only the run under chaos")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    p.add_argument("--slurm", action="store_true", help="run as jobs of the project's local Slurm (see above)")
    p.add_argument("--profile", action="append", default=[], help="with --slurm (default clusters/local.yaml)")
    p.add_argument("--lose-host-at", type=float, metavar="T", help="with --slurm: the last actor's host lost at T s")
    args = p.parse_args(argv)
    if args.lose_host_at is not None and not args.slurm:
        raise SystemExit("--lose-host-at needs --slurm: only the local Slurm's hosts can be taken away")
    kinds, signals = args.kinds.split(","), args.signals.split(",")
    for what, values, known in (("--kinds", kinds, wiring.RESTARTABLE), ("--signals", signals, tuple(SIGNALS))):
        if unknown := [v for v in values if v not in known]:
            raise SystemExit(f"{what}: {unknown} not among {list(known)}")
    overrides = [f"workers.{k}.max_restarts={args.budget}" for k in wiring.RESTARTABLE]
    overrides += [f"monitor.heartbeat_timeout={args.heartbeat_timeout}", *args.set]
    profiles = profile_files(args.profile or [LOCAL_PROFILE]) if args.slurm else []
    exp = config.with_overrides(config.load(args.experiment, profiles=profiles), overrides)
    if exp.stop.target_return is None and exp.stop.target_eval_return is None:
        raise SystemExit(f"{args.experiment}: no stop.target_return: there is no target to reach")
    out = Path(args.out or tempfile.mkdtemp(prefix=f"chaos-{exp.name}-"))
    chaos = {"kinds": kinds, "signals": signals, "every": args.every, "seed": args.seed}
    results = []
    for label, plan in ([] if args.no_baseline else [("alone", None)]) + [("chaos", chaos)]:
        print(f"{label}: {args.experiment}", flush=True)
        if args.slurm:
            r = one_slurm_run(exp, out, label, plan, args.lose_host_at)
        else:
            r = one_run(exp, out, label, plan)
        results.append(r)
        print(
            f"{label}: {'reached' if r['reached'] else 'NOT reached'} ({r['reason']}) in {r['wall_time']}s, "
            f"{r['env_frames'] or 0:,} env frames; {len(r['faults'])} faults, restarts {r['restarts']}, failed "
            f"{r['failed_workers']}; frames sent {r['frames_sent']} ({r['frames_sent_counted_at_receivers']} "
            f"of them by senders without a final report, counted where they arrived), received "
            f"{r['frames_received']}, consumed {r['frames_consumed']}, dropped {r['frames_dropped']}, lost with "
            f"replaced workers {r['frames_lost_with_replaced_workers']}, lost in flight "
            f"{r['frames_in_flight_lost']}; accounting {'exact' if r['accounting_exact'] else 'NOT exact'}"
            + traces_line(r["traces"])
            + (
                f"; host {r['host_lost']['host']} lost at {r['host_lost']['at']}s, the run went on without "
                f"{r['lost_workers']}, attempt {r['attempt']}, job {r['job_state']}"
                if r.get("host_lost")
                else ""
            ),
            flush=True,
        )
    print(json.dumps({"experiment": str(args.experiment), "chaos": chaos, "runs": results}))
    return 0 if all(r["reached"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
