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

from launcher import config, local, rundir


def run_member(run_dir: str) -> dict:
    """One member, on its node: the local-mode run of RUN/experiment.yaml. Returns its summary."""
    run_dir = Path(run_dir)
    exp = config.load(run_dir / "experiment.yaml")
    code = local.run(exp, run_dir, out=sys.stdout)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    if code != 0:
        raise RuntimeError(f"run {run_dir} ended with exit code {code}: {summary.get('reason', 'no summary')}")
    return summary


def create_members(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[Path]:
    return [rundir.create(config.replace(exp, seed=seed), sweep_dir / f"seed-{seed}")[1] for seed in seeds]


def submit(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[submitit.Job]:
    """Create each member's run directory and submit them as one job array."""
    sweep_dir = Path(sweep_dir).resolve()
    members = create_members(exp, seeds, sweep_dir)
    res, s = exp.slurm.sweep, exp.slurm
    executor = submitit.AutoExecutor(folder=sweep_dir / "submitit", cluster="slurm")
    params = {"name": f"srl-{exp.name}-sweep", "timeout_min": max(1, int(config.parse_minutes(res.time))),
              "cpus_per_task": res.cpus, "mem_gb": config.parse_size_mb(res.mem) / 1024,
              "slurm_array_parallelism": len(seeds), "slurm_setup": list(s.setup)}
    optional = {"slurm_partition": res.partition, "slurm_account": s.account, "slurm_qos": s.qos,
                "gpus_per_node": res.gpus or None}
    params.update({k: v for k, v in optional.items() if v is not None})
    executor.update_parameters(**params)
    jobs = executor.map_array(run_member, [str(m) for m in members])
    for seed, member, job in zip(seeds, members, jobs):
        (member / "slurm.json").write_text(json.dumps({"job_id": job.job_id, "sweep": str(sweep_dir), "seed": seed}))
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"experiment": exp.name, "members": [{"seed": seed, "run_dir": str(m), "job_id": j.job_id}
                                             for seed, m, j in zip(seeds, members, jobs)]}, indent=2))
    return jobs


def members_of(sweep_dir: Path) -> list[dict]:
    return json.loads((Path(sweep_dir) / "sweep.json").read_text())["members"]
