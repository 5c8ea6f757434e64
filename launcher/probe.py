"""`srl-launch doctor --probe EXP`: one small job with the experiment's exact het groups, srun lines,
container, node setup and environment, whose tasks measure (srl_hpc.probe) instead of working; then one
line per finding, in doctor's style ("ok: ...", "warn: ...", "FAIL: ... -> fix: ...").

Why: `doctor` on the login node cannot see what a task inside the allocation sees (its binding, limits,
GPUs, the network between the groups' nodes), and what the cluster's settings make of the job (a het job
refused, a QOS that counts its components) shows only at submission. The job is the run's request
(launcher.slurm.prepare) with the worker's module swapped for the probe's, a time limit of a few minutes
and no requeue; it lives in a directory of its own, and it is cancelled if the probe stops waiting. With
`slurm.layout: jobs` it is the run's jobs, one per group (each group's script with the probe's module),
submitted, followed and cancelled together as the run's would be.

This module submits, follows and explains the job. The judging functions are pure and live apart:
launcher/probe_settings.py judges the cluster's settings and the user's limits, launcher/probe_findings.py
what the tasks wrote about their nodes (srl_hpc.probe.collect) and launcher/probe_network.py how they reached
each other; all return doctor's Result tuples, and the unit tests call them with recorded JSON.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from launcher import accounting, render, runs, slurm, slurm_jobs
from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result
from launcher.probe_findings import judge_found, judge_reports
from launcher.probe_settings import (
    binds,
    judge_enforce,
    judge_het_steps,
    judge_limits,
    judge_mpi_default,
    judge_proctrack,
    judge_propagation,
    judge_task_plugin,
    read_limits,
    slurm_config,
)
from srl_hpc import config
from srl_hpc import probe as tasks
from srl_hpc.rundir import RunDir, tail

TIME = "00:05:00"  # the probe job's time limit: its tasks finish in well under a minute once started
WAIT = 600.0  # default seconds to wait for the job to start and end (--probe-wait); then it is cancelled
AFTER_REPORTS = 30.0  # once every task has reported, how long the job may take to end before it is cancelled
WORKER_MODULE, PROBE_MODULE = " -m srl_hpc.worker ", " -m srl_hpc.probe "


class ProbeError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------- the job


def probe_dir(exp: config.Experiment, given: Path | None) -> Path:
    """--run-dir, else beside the experiment's run directory (its run_dir + "-probe-<time>"), else
    runs/<name>-probe-<time>: never a run's own directory."""
    if given is not None:
        return Path(given).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if exp.run_dir:
        return Path(f"{exp.run_dir}-probe-{stamp}").resolve()
    return runs.resolve(config.replace(exp, run_dir=None), None, suffix="-probe")


def probe_plan(plan: planning.Plan) -> planning.Plan:
    return dataclasses.replace(plan, job_name=f"srl-probe-{plan.experiment}", time=TIME, requeue=None)


def probe_script(plan: planning.Plan, command: str) -> str:
    """The run's job script (launcher.render, with the run's own template) with each srun line's worker
    module replaced by the probe's: same groups, options, container prefix, node setup and exports."""
    text = render.render(plan, command)
    found = text.count(WORKER_MODULE)
    if found != len(plan.groups):
        raise ProbeError(
            f"the job script names the worker module ({WORKER_MODULE.strip()}) {found} times, not once "
            f"per het group ({len(plan.groups)}): a template of your own (slurm.template) must start "
            f"the workers through the srun lines it is given (${{srun_lines}})"
        )
    return text.replace(WORKER_MODULE, PROBE_MODULE)


def probe_scripts(plan: planning.Plan, command: str) -> list[tuple[str, str]]:
    """slurm.layout: jobs: the run's script of each group (launcher.render.render_groups) with its srun line's
    worker module replaced by the probe's; the worker's arguments, --first-task among them, stay."""
    scripts = []
    for group, text in render.render_groups(plan, command):
        found = text.count(WORKER_MODULE)
        if found != 1:
            raise ProbeError(
                f"group {group}'s job script names the worker module ({WORKER_MODULE.strip()}) {found} "
                f"times, not once: a template of your own (slurm.template) must start the workers "
                f"through the srun line it is given (${{srun_line}})"
            )
        scripts.append((group, text.replace(WORKER_MODULE, PROBE_MODULE)))
    return scripts


def judge_job(
    job_id: str, groups: int, state: str, found: dict, names: list[str], jobs: dict[str, tuple[str, str]] | None = None
) -> Result:
    """The het job itself: that its components ran together and one srun step spanned them (a task of every
    group started) is the proof that this cluster takes het jobs and het steps; missing tasks are
    judge_reports'. jobs (slurm.layout: jobs): group -> (its job, the state it ended in): judge_group_jobs."""
    if jobs is not None:
        return judge_group_jobs(jobs, found, names)
    reported_groups = {f["group"] for f in found["facts"].values()}
    if len(reported_groups) == groups:
        return (
            OK,
            f"het job {job_id}: its {groups} component(s) ran together and one srun step spanned them "
            f"({len(found['facts'])} of {len(names)} tasks started): heterogeneous jobs and steps work here",
            "",
        )
    return (
        FAIL,
        f"het job {job_id} ended {state} with {len(found['facts'])} of {len(names)} tasks started "
        f"({len(reported_groups)} of {groups} groups)",
        "Slurm's word on the job and the tasks' logs are below",
    )


def judge_group_jobs(jobs: dict[str, tuple[str, str]], found: dict, names: list[str]) -> Result:
    """slurm.layout: jobs: each group's ordinary job ran (a task of it started) and their tasks met through files
    in the probe directory, or the groups whose jobs started no task, with how those jobs ended."""
    shown = "jobs " + ", ".join(f"{job} ({group})" for group, (job, _) in jobs.items())
    reported_groups = {f["group"] for f in found["facts"].values()}
    started = f"{len(found['facts'])} of {len(names)} tasks started"
    idle = [group for group in jobs if group not in reported_groups]
    if idle:
        return (
            FAIL,
            f"{shown}: "
            + "; ".join(f"group {g}'s job {jobs[g][0]} started no task (Slurm: {jobs[g][1]})" for g in idle)
            + f" ({started})",
            "Slurm's word on each job and the tasks' logs are below",
        )
    met = all("error" not in ((found["results"].get(n) or {}).get("rendezvous") or {"error": ""}) for n in names)
    return (
        OK,
        f"{shown}: each group's ordinary job ran"
        + (
            " and their tasks met through files in the probe directory"
            if met
            else " (whether their tasks met: the file rendezvous line below)"
        )
        + f" ({started})",
        "",
    )


def refusal_fix(message: str) -> str:
    """What to do about sbatch's refusal, by what Slurm said."""
    text = message.lower()
    if "heterogeneous" in text or "hetjob" in text or "het job" in text:
        return (
            "this cluster does not take heterogeneous jobs: set slurm.layout: jobs (one ordinary job per group, "
            "the workers meeting through files), or ask the admins whether het jobs can be enabled for you"
        )
    if "qos" in text or "maxsubmit" in text or "association" in text:
        return "the QOS or association lines above say which limit; slurm.qos / slurm.account choose another"
    if "account" in text:
        return "set slurm.account to one of yours (sacctmgr show assoc user=$USER)"
    if "partition" in text:
        return "slurm.<group>.partition must name a partition you may use (sinfo -s lists them)"
    return "the experiment's own submission would meet the same refusal: change what Slurm names and probe again"


# ---------------------------------------------------------------------------------------- side effects


def _say(text: str) -> None:
    print(f"probe: {text}", file=sys.stderr, flush=True)


def run(
    exp: config.Experiment, given_dir: Path | None, command: str, wait: float = WAIT, say: Callable[[str], None] = _say
) -> Iterator[Result]:
    """The probe, one Result at a time: the cluster's settings, the job (with slurm.layout: jobs, one per
    group), then what its tasks found."""
    cfg = slurm_config()
    if isinstance(cfg, str):
        yield FAIL, f"scontrol show config: {cfg}", "run the probe on the cluster's login node (or module load slurm)"
        return
    layout = exp.slurm.layout
    het_steps = judge_het_steps(cfg, layout)
    yield judge_task_plugin(cfg)
    yield judge_proctrack(cfg)
    yield judge_mpi_default(cfg, exp.slurm.mpi, layout)
    yield het_steps
    yield judge_propagation(cfg, resource.getrlimit(resource.RLIMIT_NOFILE))
    yield judge_enforce(cfg)

    root = probe_dir(exp, given_dir)
    exp = config.replace(exp, run_dir=str(root))
    try:
        request = slurm.prepare(exp, root, sys.executable, command)
    except planning.PlanError as e:
        for problem in e.problems:
            if het_steps[0] != FAIL or "disable_hetero_steps" not in problem:  # (else said just above)
                yield FAIL, f"the experiment's job: {problem}", "change the slurm settings it names"
        return
    except slurm.SlurmError as e:
        yield (
            FAIL,
            f"the experiment's job could not be checked against the cluster: {e}",
            "run the probe on the cluster's login node",
        )
        return
    yield from judge_limits(request.plan, cfg, read_limits(cfg) if accounting.has_accounting(cfg) else "")
    if het_steps[0] == FAIL:  # (prepare refuses it too; a job without its srun would only wait for its limit)
        return

    job_plan = probe_plan(request.plan)
    try:
        if job_plan.layout == "jobs":
            scripts = probe_scripts(job_plan, command)
            job = dataclasses.replace(
                request, plan=job_plan, script=render.every_script(scripts), scripts=tuple(scripts)
            )
        else:
            job = dataclasses.replace(request, plan=job_plan, script=probe_script(job_plan, command), scripts=())
    except ProbeError as e:
        yield FAIL, str(e), "use the shipped template (remove slurm.template) to probe"
        return
    exp, run_dir = runs.create(exp, root)
    try:
        job_id = slurm.submit(job, run_dir, command)
    except slurm.SlurmError as e:
        if job.scripts:
            yield (
                FAIL,
                f"sbatch refused the probe's jobs (slurm.layout: jobs, {len(job.scripts)} groups): {e}",
                refusal_fix(str(e)),
            )
            return
        said = str(e).split(": ", 1)[-1] if "failed (exit" in str(e) else str(e)
        yield FAIL, f"sbatch refused the probe's het job ({len(job_plan.groups)} components): {said}", refusal_fix(said)
        return
    groups = slurm.group_jobs(run_dir)
    if groups:
        say(
            f"submitted jobs {', '.join(f'{j} ({g})' for g, j in groups.items())} ({job_plan.ntasks} tasks, one "
            f"job per group); directory {root}"
        )
    else:
        say(f"submitted job {job_id} ({job_plan.ntasks} tasks in {len(job_plan.groups)} het groups); directory {root}")
    state, gave_up = follow(job_id, run_dir, job_plan, wait, say)
    names = [w for g in job_plan.groups for w in g.workers]
    found = tasks.collect(root, names)
    if gave_up:
        yield gave_up
    explained, jobs = [job_id], None
    if groups:  # how each group's job ended: the ones that did not complete are explained
        infos = slurm_jobs.job_states(list(groups.values()))
        jobs = {g: (j, infos[j].raw) for g, j in groups.items()}
        explained = [j for j in groups.values() if infos[j].state != "completed"] or list(groups.values())
    yield judge_job(job_id, len(job_plan.groups), state, found, names, jobs)
    if len(found["facts"]) < len(names) or len(found["results"]) < len(names):
        yield from judge_reports(job_plan, found)
        yield from explain_end(explained, run_dir, [n for n in names if n not in found["results"]])
    if found["facts"]:
        yield from judge_found(job_plan, exp, found, binds(cfg))
    say(f"the probe's files are in {root}")


def _reported(run_dir: RunDir) -> int:
    """Tasks that have ended every phase: one directory listing."""
    try:
        return len([f for f in os.listdir(tasks.ProbeDir(run_dir.root).done) if not f.startswith(".")])
    except OSError:
        return 0


def follow(job_id: str, run_dir: RunDir, plan: planning.Plan, wait: float, say) -> tuple[str, Result | None]:
    """Until the job ends (with slurm.layout: jobs, every group's job: slurm.json lists them), at most `wait`
    seconds, asking Slurm as launcher.slurm_jobs.Watch does; tasks' reports as they come. Jobs still pending or
    running then are cancelled (the second value says so); so are ones that outlive every task's report by
    AFTER_REPORTS seconds (a hung srun)."""
    names = [w for g in plan.groups for w in g.workers]
    ids, groups = slurm.jobs_of(run_dir), slurm.group_jobs(run_dir)
    what = f"job {job_id} was" if not groups else f"jobs {', '.join(ids)} were"
    counts: dict[str, float | None] = {"reported": 0, "all_since": None}

    def all_reported() -> bool:
        return counts["reported"] == len(names)

    def cancel_live() -> dict[str, slurm_jobs.JobInfo]:
        """Slurm's word on each job just before the live ones are cancelled."""
        infos = slurm_jobs.job_states(ids)
        live = [i for i in ids if infos[i].state not in slurm_jobs.FINISHED]
        if live:
            slurm_jobs.cancel(*live)
        return infos

    watch = slurm_jobs.Watch(
        lambda: ids,
        ending=all_reported,
        say=say,
        groups=lambda: groups,
        started=lambda job: run_dir.slurm_output(job).exists(),
    )
    deadline = time.monotonic() + wait
    try:
        while True:
            n = _reported(run_dir)
            if n != counts["reported"]:
                counts["reported"] = n
                say(f"{n} of {len(names)} tasks have reported")
                if n == len(names):
                    counts["all_since"] = time.monotonic()
            final = watch.check()
            if final is not None:
                return final, None
            if counts["all_since"] and time.monotonic() - counts["all_since"] > AFTER_REPORTS:
                cancel_live()
                return "CANCELLED", (
                    WARN,
                    f"{what} still {watch.state} {AFTER_REPORTS:.0f} s after every task had reported; cancelled",
                    "an srun that outlives its step (srl_hpc/srun_guard.py ends those in runs)",
                )
            if time.monotonic() > deadline:
                infos = cancel_live()
                _, info = slurm_jobs.current(ids, infos, together=bool(groups))
                now = slurm_jobs.groups_line(groups, infos) if groups else f"job {job_id} was {info.line()}"
                return info.raw, (
                    FAIL,
                    f"the probe gave up after {wait:.0f} s: {now}; cancelled",
                    "the cluster is busy or the job cannot start (the reason above): probe again with "
                    "a longer --probe-wait, or change what the reason names",
                )
            time.sleep(1.0)
    except BaseException:
        slurm_jobs.cancel(*ids)  # Ctrl-C or an error: never leave the probe's jobs behind
        raise


def explain_end(job_ids: list[str], run_dir: RunDir, missing: list[str]) -> Iterator[Result]:
    """Slurm's word on how each job (the jobs layout: each group's job that did not complete) ended, the last
    lines of the missing tasks' logs and of each job's output."""
    for job_id in job_ids:
        for line in slurm_jobs.job_end(job_id):
            yield WARN, line, f"the job's output: {run_dir.slurm_output(job_id)}"
    for name in missing[:3]:
        yield (
            WARN,
            f"{name}'s log ({run_dir.log(name)}), last lines: " + " | ".join(tail(run_dir.log(name), 5).splitlines()),
            "it says why the task stopped",
        )
    for job_id in job_ids:
        output = run_dir.slurm_output(job_id)
        if output.exists():
            yield (
                WARN,
                f"the job's output ({output}), last lines: " + " | ".join(tail(output, 5).splitlines()),
                "the batch script's own errors (slurm.setup, the container) show there",
            )
