"""Sweeps: several seeds of an experiment that fits one node, as one submitit job array.

Each array task runs the local-mode launcher on its node, in its own run directory
(SWEEP/seed-N/). submitit cannot express heterogeneous jobs, so multi-node runs use the hetjob
template instead (launcher.slurm). With `slurm.requeue`, a member signalled before its time limit
(or preempted) stops cleanly and is requeued through submitit's checkpointing, and resumes.
The `slurm` section's setup lines, env, python and sbatch_options apply to the array as to a het job
(executor_settings says how each becomes submitit's).
"""
from __future__ import annotations

import json
import shlex
import signal
import sys
import time
from pathlib import Path

import submitit

from launcher import local, render, runs
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


# sbatch's short options -> their long names (submitit writes `#SBATCH --name=value`); a short option
# that is a flag maps to a name whose value is True
SHORT_OPTIONS = {"-A": "account", "-C": "constraint", "-c": "cpus-per-task", "-D": "chdir", "-d": "dependency",
                 "-e": "error", "-G": "gpus", "-J": "job-name", "-L": "licenses", "-M": "clusters", "-N": "nodes",
                 "-n": "ntasks", "-o": "output", "-p": "partition", "-q": "qos", "-s": "oversubscribe",
                 "-t": "time", "-w": "nodelist", "-x": "exclude"}


def sbatch_parameters(options) -> dict:
    """slurm.sbatch_options ("--exclusive", "--constraint=a100", "--mail-type END", "-C a100") as submitit's
    slurm_additional_parameters: name (with underscores, so that an option submitit also sets replaces
    its value) -> value, or True for a flag."""
    out: dict = {}
    for option in options:
        text = option.strip()
        if text.startswith("--"):
            name, sep, value = text[2:].partition("=")
            if not sep:
                name, _, value = name.partition(" ")
        elif text[:2] in SHORT_OPTIONS:
            name, value = SHORT_OPTIONS[text[:2]], text[2:].lstrip("= ")
        else:
            raise config.ConfigError("slurm.sbatch_options", [(
                "slurm.sbatch_options", None, f"{option!r}: a sweep passes sbatch options to submitit as "
                "--name[=value] (or one of the short options " + " ".join(sorted(SHORT_OPTIONS)) + ")")])
        out[name.strip().replace("-", "_")] = value.strip() or True
    return out


def executor_settings(exp: config.Experiment, members: int, sweep_dir: Path) -> tuple[dict, dict]:
    """(submitit.AutoExecutor's keyword arguments, its update_parameters') for a sweep of `members` runs:
    slurm.sweep's resources, account and qos, and as for a het job the setup lines then `export`s of
    slurm.env before the member starts, slurm.python as the python that runs it (and its workers), in
    slurm.container's image (the sweep directory bound), and slurm.sbatch_options as #SBATCH lines."""
    res, s = exp.slurm.sweep, exp.slurm
    # without slurm.requeue a member near its time limit still stops cleanly (checkpoint kept), and is
    # requeued only when preempted
    ctor = {"slurm_max_num_timeout": s.requeue.max_requeues if s.requeue else 0}
    prefix = render.exec_prefix(s.container, str(sweep_dir), gpus=res.gpus > 0)
    if s.python or prefix:
        python = shlex.split(s.python) if s.python else [sys.executable]
        ctor["slurm_python"] = " ".join(shlex.quote(w) for w in [*prefix, *python])
    setup = [*s.setup, *(f"export {k}={shlex.quote(str(v))}" for k, v in sorted(s.env.items()))]
    params = {"name": f"srl-{exp.name}-sweep", "timeout_min": max(1, int(config.parse_minutes(res.time))),
              "cpus_per_task": res.cpus, "mem_gb": config.parse_size_mb(res.mem) / 1024,
              "slurm_array_parallelism": members, "slurm_setup": setup}
    if s.requeue:  # submitit's own signal (USR2, to every process of the task) that many seconds before the end
        params["slurm_signal_delay_s"] = s.requeue.signal_seconds
    optional = {"slurm_partition": res.partition, "slurm_account": s.account, "slurm_qos": s.qos,
                "gpus_per_node": res.gpus or None,
                "slurm_srun_args": render.pyxis_options(s.container, str(sweep_dir)) or None,
                "slurm_additional_parameters": sbatch_parameters(s.sbatch_options) or None}
    params.update({k: v for k, v in optional.items() if v is not None})
    return ctor, params


def make_executor(exp: config.Experiment, folder: Path, members: int) -> submitit.AutoExecutor:
    """The sweep's submitit executor, set up and not yet used (its script: executor_settings)."""
    ctor, params = executor_settings(exp, members, folder.parent)
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **ctor)
    executor.update_parameters(**params)
    return executor


def submit(exp: config.Experiment, seeds: list[int], sweep_dir: Path) -> list[submitit.Job]:
    """Create each member's run directory and submit them as one job array."""
    sweep = RunDir(Path(sweep_dir).resolve())
    # (an sbatch option submitit cannot take: an error before any directory)
    executor_settings(exp, len(seeds), sweep.root)
    members = [run for _, run in create_members(exp, seeds, sweep.root)]
    executor = make_executor(exp, sweep.root / "submitit", len(seeds))
    jobs = executor.map_array(Member(), [str(m.root) for m in members])
    for seed, member, job in zip(seeds, members, jobs):
        member.slurm.write_text(json.dumps({"job_id": job.job_id, "sweep": str(sweep.root), "seed": seed}))
    sweep.sweep.write_text(json.dumps(
        {"experiment": exp.name, "members": [{"seed": seed, "run_dir": str(m.root), "job_id": j.job_id}
                                             for seed, m, j in zip(seeds, members, jobs)]}, indent=2))
    return jobs


def members_of(sweep: RunDir) -> list[dict]:
    return json.loads(sweep.sweep.read_text())["members"]
