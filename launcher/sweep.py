"""Sweeps: an experiment over a grid (or a list) of override sets and seeds, each member one run that fits one
node, run one after another here or as one submitit job array on Slurm.

`--sweep KEY=V1,V2` (repeatable: every combination) or `--sweep-set "K1=V1 K2=V2"` (repeatable: one
configuration each) times `--seeds`, or the same in the experiment file (`slurm.sweep.grid`, `.sets`,
`.seeds`; the command line's replace them): each member is its own run directory, SWEEP/<overrides>/seed-N/
(SWEEP/seed-N/ for seeds alone), and SWEEP/sweep.json lists them for status, cancel and srl-trace.
On Slurm each array task runs the local-mode launcher on its node. submitit cannot express heterogeneous
jobs, so multi-node runs use the hetjob template instead (launcher.slurm). With `slurm.requeue`, a member
signalled before its time limit (or preempted) stops cleanly and is requeued through submitit's
checkpointing, and resumes. The `slurm` section's setup lines, env, python and sbatch_options apply to the
array as to a het job (executor_settings says how each becomes submitit's).
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

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


@dataclass(frozen=True)
class Point:
    """One member of a sweep: its overrides (KEY=VALUE, as --set takes them) and its seed."""

    overrides: tuple[str, ...]
    seed: int

    @property
    def config(self) -> str:
        """Its configuration's name, from its overrides ("" for a sweep of seeds alone)."""
        return "+".join(re.sub(r"[^A-Za-z0-9._=-]", "_", o.replace(" ", "")) for o in self.overrides)

    @property
    def path(self) -> str:
        return f"{self.config}/seed-{self.seed}" if self.config else f"seed-{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.config} seed {self.seed}" if self.config else f"seed {self.seed}"


class SweepError(ValueError):
    pass


def split_values(text: str) -> list[str]:
    """ "1e-3,3e-4" -> ["1e-3", "3e-4"]; commas inside brackets or quotes stay: "[64,64],[128]" is two values."""
    values, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    return values


def configurations(grid: list[str], sets: list[str]) -> list[tuple[str, ...]]:
    """The overrides of each configuration: every combination of the --sweep axes (the first outermost), or
    each --sweep-set's KEY=VALUE words; one empty configuration when there are neither."""
    if grid and sets:
        raise SweepError(
            "--sweep (a grid) and --sweep-set (a list) cannot be combined: write the grid's "
            "points as --sweep-set, or the list's keys as --sweep axes"
        )
    axes = []
    for word in grid:
        key, sep, values = word.partition("=")
        choices = split_values(values) if sep else []
        if not key or not choices or not all(choices):
            raise SweepError(f"--sweep {word!r}: expected KEY=VALUE1,VALUE2,... (e.g. --sweep algorithm.lr=1e-3,3e-4)")
        if len(set(choices)) != len(choices):
            raise SweepError(f"--sweep {word!r}: a value appears twice")
        axes.append([f"{key}={v}" for v in choices])
    if len({a[0].partition("=")[0] for a in axes}) != len(axes):
        raise SweepError("--sweep: a key is given twice (give its values in one --sweep KEY=V1,V2)")
    found = [tuple(shlex.split(words)) for words in sets]
    for words, overrides in zip(sets, found):
        if not overrides or not all("=" in w[1:] for w in overrides):
            raise SweepError(
                f'--sweep-set {words!r}: expected KEY=VALUE words (e.g. "algorithm.lr=1e-3 algorithm.epochs=8")'
            )
    return found or list(itertools.product(*axes))


def from_experiment(sweep) -> tuple[list[str], list[str], list[int]]:
    """An experiment's slurm.sweep grid, sets and seeds as the command line's --sweep, --sweep-set and --seeds
    words (each value written as YAML flow text, so that --set reads it back the same)."""

    def word(value) -> str:
        return json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value

    grid = [f"{key}={','.join(word(v) for v in values)}" for key, values in sweep.grid.items()]
    sets = [" ".join(shlex.quote(f"{key}={word(v)}") for key, v in one.items()) for one in sweep.sets]
    return grid, sets, list(sweep.seeds)


def points(configs: list[tuple[str, ...]], seeds: list[int]) -> list[Point]:
    """Every configuration with every seed (configuration outermost); two configurations whose directory names
    would be the same are refused."""
    out = [Point(c, seed) for c in configs for seed in seeds]
    names = [p.path for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SweepError(f"two members would share the run directory {twice[0]!r}: make the overrides differ")
    return out


def member_experiments(exp: config.Experiment, members: list[Point]) -> list[config.Experiment]:
    """Each member's experiment: the overrides, then the seed. Every member is built (and so checked) before
    any run directory is made."""
    plain = config.with_overrides(exp, ["slurm.sweep.grid={}", "slurm.sweep.sets=[]", "slurm.sweep.seeds=[]"])
    return [config.replace(config.with_overrides(plain, list(p.overrides)), seed=p.seed) for p in members]


def create_members(
    exp: config.Experiment, members: list[Point], sweep_dir: Path
) -> list[tuple[config.Experiment, RunDir]]:
    built = member_experiments(exp, members)
    return [runs.create(member, Path(sweep_dir) / p.path) for member, p in zip(built, members)]


def write_index(
    exp: config.Experiment,
    sweep_dir: Path,
    members: list[Point],
    run_dirs: list[RunDir],
    command: str,
    job_ids: list[str] | None = None,
) -> None:
    """SWEEP/sweep.json: the command that made the sweep, and each member's configuration, overrides, seed, run
    directory (and job id on Slurm)."""
    rows = [
        {"config": p.config, "overrides": list(p.overrides), "seed": p.seed, "run_dir": str(run.root)}
        for p, run in zip(members, run_dirs)
    ]
    for row, job_id in zip(rows, job_ids or []):
        row["job_id"] = job_id
    RunDir(sweep_dir).sweep.write_text(
        json.dumps({"experiment": exp.name, "command": command, "members": rows}, indent=2)
    )


# sbatch's short options -> their long names (submitit writes `#SBATCH --name=value`); a short option
# that is a flag maps to a name whose value is True
SHORT_OPTIONS = {
    "-A": "account",
    "-C": "constraint",
    "-c": "cpus-per-task",
    "-D": "chdir",
    "-d": "dependency",
    "-e": "error",
    "-G": "gpus",
    "-J": "job-name",
    "-L": "licenses",
    "-M": "clusters",
    "-N": "nodes",
    "-n": "ntasks",
    "-o": "output",
    "-p": "partition",
    "-q": "qos",
    "-s": "oversubscribe",
    "-t": "time",
    "-w": "nodelist",
    "-x": "exclude",
}


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
            raise config.ConfigError(
                "slurm.sbatch_options",
                [
                    (
                        "slurm.sbatch_options",
                        None,
                        f"{option!r}: a sweep passes sbatch options to submitit as "
                        "--name[=value] (or one of the short options " + " ".join(sorted(SHORT_OPTIONS)) + ")",
                    )
                ],
            )
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
    ctor: dict[str, int | str] = {"slurm_max_num_timeout": s.requeue.max_requeues if s.requeue else 0}
    prefix = render.exec_prefix(s.container, str(sweep_dir), gpus=res.gpus > 0)
    if s.python or prefix:
        python = shlex.split(s.python) if s.python else [sys.executable]
        ctor["slurm_python"] = " ".join(shlex.quote(w) for w in [*prefix, *python])
    setup = [*s.setup, *(f"export {k}={shlex.quote(str(v))}" for k, v in sorted(s.env.items()))]
    params = {
        "name": f"srl-{exp.name}-sweep",
        "timeout_min": max(1, int(cast(float, config.parse_minutes(res.time)))),  # validated: not None
        "cpus_per_task": res.cpus,
        "mem_gb": cast(int, config.parse_size_mb(res.mem)) / 1024,
        "slurm_array_parallelism": members,
        "slurm_setup": setup,
    }
    if s.requeue:  # submitit's own signal (USR2, to every process of the task) that many seconds before the end
        params["slurm_signal_delay_s"] = s.requeue.signal_seconds
    optional = {
        "slurm_partition": res.partition,
        "slurm_account": s.account,
        "slurm_qos": s.qos,
        "gpus_per_node": res.gpus or None,
        "slurm_srun_args": render.pyxis_options(s.container, str(sweep_dir)) or None,
        "slurm_additional_parameters": sbatch_parameters(s.sbatch_options) or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    return ctor, params


def make_executor(exp: config.Experiment, folder: Path, members: int) -> submitit.AutoExecutor:
    """The sweep's submitit executor, set up and not yet used (its script: executor_settings)."""
    ctor, params = executor_settings(exp, members, folder.parent)
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **ctor)
    executor.update_parameters(**params)
    return executor


def submit(exp: config.Experiment, members: list[Point], sweep_dir: Path, command: str) -> list[submitit.Job]:
    """Create each member's run directory and submit them as one job array."""
    sweep = RunDir(Path(sweep_dir).resolve())
    # (an sbatch option submitit cannot take: an error before any directory)
    executor_settings(exp, len(members), sweep.root)
    run_dirs = [run for _, run in create_members(exp, members, sweep.root)]
    executor = make_executor(exp, sweep.root / "submitit", len(members))
    jobs = executor.map_array(Member(), [str(run.root) for run in run_dirs])
    for p, run, job in zip(members, run_dirs, jobs):
        run.slurm.write_text(
            json.dumps({"job_id": job.job_id, "sweep": str(sweep.root), "seed": p.seed, "config": p.config})
        )
    write_index(exp, sweep.root, members, run_dirs, command, [j.job_id for j in jobs])
    return jobs


def label(member: dict) -> str:
    """A sweep.json member as status and the follow lines name it ("algorithm.lr=0.001 seed 2", "seed 2")."""
    return Point(tuple(member.get("overrides", ())), member["seed"]).label


def members_of(sweep: RunDir) -> list[dict]:
    return json.loads(sweep.sweep.read_text())["members"]
