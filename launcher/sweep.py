"""Sweeps: several seeds of an experiment that fits one node, as one submitit job array.

Each array task runs the local-mode launcher on its node, in its own run directory
(SWEEP/seed-N/). submitit cannot express heterogeneous jobs, so multi-node runs use the hetjob
template instead (launcher.slurm). With `slurm.requeue`, a member signalled before its time limit
(or preempted) stops cleanly and is requeued through submitit's checkpointing, and resumes.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import submitit

from launcher import local, runs
from srl_hpc import config
from srl_hpc.rundir import RunDir

STOP_WAIT = 90.0  # at a checkpoint signal: longest wait for the run to stop (the controller's stop takes <= 30 s)


class Member(submitit.helpers.Checkpointable):
    """One member, on its node: the local-mode run of RUN/experiment.yaml; returns its summary.

    Before the time limit (or on preemption) submitit calls checkpoint() from its signal handler: the
    run is stopped as Ctrl-C stops it (the trainer checkpoints) and the same call is requeued; the
    requeued call finds the run's earlier attempt and resumes it, as `srl-launch resume` does."""

    def __call__(self, run_dir: str) -> dict:
        run = RunDir(run_dir)
        if run.summary.exists() or run.checkpoint.exists():  # requeued: the next attempt of this run
            exp, run = runs.reopen(run.root)
        else:
            exp = config.load(run.experiment)
        code = local.run(exp, run, out=sys.stdout)
        summary = json.loads(run.summary.read_text()) if run.summary.exists() else {}
        if code != 0:
            raise RuntimeError(f"run {run.root} ended with exit code {code}: {summary.get('reason', 'no summary')}")
        return summary

    def checkpoint(self, run_dir: str) -> submitit.helpers.DelayedSubmission:
        run = RunDir(run_dir)
        signal.raise_signal(signal.SIGTERM)  # local.run's handler runs now: every worker stops cleanly
        deadline = time.monotonic() + STOP_WAIT
        while not run.summary.exists() and time.monotonic() < deadline:  # written once the trainer checkpointed
            time.sleep(0.5)
        return super().checkpoint(run_dir)


def create_members(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[tuple[config.Experiment, RunDir]]:
    return [runs.create(config.replace(exp, seed=seed), Path(sweep_dir) / f"seed-{seed}") for seed in seeds]


def submit(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[submitit.Job]:
    """Create each member's run directory and submit them as one job array."""
    sweep = RunDir(Path(sweep_dir).resolve())
    members = [run for _, run in create_members(exp, seeds, sweep.root)]
    res, s = exp.slurm.sweep, exp.slurm
    # without slurm.requeue a member near its time limit still stops cleanly (checkpoint kept), and is
    # requeued only when preempted
    executor = submitit.AutoExecutor(folder=sweep.root / "submitit", cluster="slurm",
                                     slurm_max_num_timeout=s.requeue.max_requeues if s.requeue else 0)
    params = {"name": f"srl-{exp.name}-sweep", "timeout_min": max(1, int(config.parse_minutes(res.time))),
              "cpus_per_task": res.cpus, "mem_gb": config.parse_size_mb(res.mem) / 1024,
              "slurm_array_parallelism": len(seeds), "slurm_setup": list(s.setup)}
    if s.requeue:  # submitit's own signal (USR2, to every process of the task) that many seconds before the end
        params["slurm_signal_delay_s"] = s.requeue.signal_seconds
    optional = {"slurm_partition": res.partition, "slurm_account": s.account, "slurm_qos": s.qos,
                "gpus_per_node": res.gpus or None}
    params.update({k: v for k, v in optional.items() if v is not None})
    executor.update_parameters(**params)
    jobs = executor.map_array(Member(), [str(m.root) for m in members])
    for seed, member, job in zip(seeds, members, jobs):
        member.slurm.write_text(json.dumps({"job_id": job.job_id, "sweep": str(sweep.root), "seed": seed}))
    sweep.sweep.write_text(json.dumps(
        {"experiment": exp.name, "members": [{"seed": seed, "run_dir": str(m.root), "job_id": j.job_id}
                                             for seed, m, j in zip(seeds, members, jobs)]}, indent=2))
    return jobs


def members_of(sweep: RunDir) -> list[dict]:
    return json.loads(sweep.sweep.read_text())["members"]
