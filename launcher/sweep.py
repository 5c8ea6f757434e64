"""Sweeps: several seeds of an experiment that fits one node, as one submitit job array.

Each array task runs the local-mode launcher on its node, in its own run directory
(SWEEP/seed-N/). submitit cannot express heterogeneous jobs, so multi-node runs use the hetjob
template instead (launcher.slurm).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import submitit

from launcher import local, runs
from srl_hpc import config
from srl_hpc.rundir import RunDir


def run_member(run_dir: str) -> dict:
    """One member, on its node: the local-mode run of RUN/experiment.yaml. Returns its summary."""
    run = RunDir(run_dir)
    code = local.run(config.load(run.experiment), run, out=sys.stdout)
    summary = json.loads(run.summary.read_text()) if run.summary.exists() else {}
    if code != 0:
        raise RuntimeError(f"run {run.root} ended with exit code {code}: {summary.get('reason', 'no summary')}")
    return summary


def create_members(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[tuple[config.Experiment, RunDir]]:
    return [runs.create(config.replace(exp, seed=seed), Path(sweep_dir) / f"seed-{seed}") for seed in seeds]


def submit(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[submitit.Job]:
    """Create each member's run directory and submit them as one job array."""
    sweep = RunDir(Path(sweep_dir).resolve())
    members = [run for _, run in create_members(exp, seeds, sweep.root)]
    res, s = exp.slurm.sweep, exp.slurm
    executor = submitit.AutoExecutor(folder=sweep.root / "submitit", cluster="slurm")
    params = {"name": f"srl-{exp.name}-sweep", "timeout_min": max(1, int(config.parse_minutes(res.time))),
              "cpus_per_task": res.cpus, "mem_gb": config.parse_size_mb(res.mem) / 1024,
              "slurm_array_parallelism": len(seeds), "slurm_setup": list(s.setup)}
    optional = {"slurm_partition": res.partition, "slurm_account": s.account, "slurm_qos": s.qos,
                "gpus_per_node": res.gpus or None}
    params.update({k: v for k, v in optional.items() if v is not None})
    executor.update_parameters(**params)
    jobs = executor.map_array(run_member, [str(m.root) for m in members])
    for seed, member, job in zip(seeds, members, jobs):
        member.slurm.write_text(json.dumps({"job_id": job.job_id, "sweep": str(sweep.root), "seed": seed}))
    sweep.sweep.write_text(json.dumps(
        {"experiment": exp.name, "members": [{"seed": seed, "run_dir": str(m.root), "job_id": j.job_id}
                                             for seed, m, j in zip(seeds, members, jobs)]}, indent=2))
    return jobs


def members_of(sweep: RunDir) -> list[dict]:
    return json.loads(sweep.sweep.read_text())["members"]
