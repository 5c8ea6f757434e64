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

Side effects (scontrol, sacctmgr, squeue, sbatch, waiting) are kept apart from the judging functions, which
take the plan and what the tasks wrote (srl_hpc.probe.collect) and return doctor's Result tuples; the unit
tests call them with recorded JSON.
"""
from __future__ import annotations

import dataclasses
import os
import resource
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from launcher import accounting, render, runs, slurm
from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result
from srl_hpc import config, graph as wiring
from srl_hpc import probe as tasks
from srl_hpc.rundir import RunDir, tail
from srl_hpc.services import limits, network

TIME = "00:05:00"  # the probe job's time limit: its tasks finish in well under a minute once started
WAIT = 600.0  # default seconds to wait for the job to start and end (--probe-wait); then it is cancelled
AFTER_REPORTS = 30.0  # once every task has reported, how long the job may take to end before it is cancelled
WORKER_MODULE, PROBE_MODULE = " -m srl_hpc.worker ", " -m srl_hpc.probe "
RANKS_FIX = ("slurm.mpi must name the plugin your mpi4py's MPI starts under (srun --mpi=list; `srl-launch doctor "
             "EXP` checks mpi4py), or slurm.mpi: none (workers meet through files in the run directory)")


class ProbeError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------- the job

def probe_dir(exp: config.Experiment, given: Optional[Path]) -> Path:
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
        raise ProbeError(f"the job script names the worker module ({WORKER_MODULE.strip()}) {found} times, not once "
                         f"per het group ({len(plan.groups)}): a template of your own (slurm.template) must start "
                         f"the workers through the srun lines it is given (${{srun_lines}})")
    return text.replace(WORKER_MODULE, PROBE_MODULE)


def probe_scripts(plan: planning.Plan, command: str) -> list[tuple[str, str]]:
    """slurm.layout: jobs: the run's script of each group (launcher.render.render_groups) with its srun line's
    worker module replaced by the probe's; the worker's arguments, --first-task among them, stay."""
    scripts = []
    for group, text in render.render_groups(plan, command):
        found = text.count(WORKER_MODULE)
        if found != 1:
            raise ProbeError(f"group {group}'s job script names the worker module ({WORKER_MODULE.strip()}) {found} "
                             f"times, not once: a template of your own (slurm.template) must start the workers "
                             f"through the srun line it is given (${{srun_line}})")
        scripts.append((group, text.replace(WORKER_MODULE, PROBE_MODULE)))
    return scripts


def jobs_counted(plan: planning.Plan) -> int:
    """Jobs the run counts toward MaxJobs / MaxSubmit: a het job counts one per component, and the jobs
    layout is a job per group."""
    return len(plan.groups)


def counted_text(plan: planning.Plan) -> str:
    """'3 het components', or '3 jobs (one per group)' with slurm.layout: jobs."""
    if plan.layout == "jobs":
        return f"{jobs_counted(plan)} jobs (one per group)"
    return f"{jobs_counted(plan)} het components"


# --------------------------------------------------------------------------- the cluster (login node)

def _unset(value: Optional[str]) -> bool:
    return value is None or value in ("(null)", "", "none", "None", "(null type)")


def binds(cfg: dict[str, str]) -> bool:
    return any(p in cfg.get("TaskPlugin", "") for p in ("task/affinity", "task/cgroup"))


def judge_task_plugin(cfg: dict[str, str]) -> Result:
    value = cfg.get("TaskPlugin", "(null)")
    if binds(cfg):
        return OK, f"TaskPlugin={value}: tasks are bound to the CPUs they were given (each group's CPUs below)", ""
    return WARN, f"TaskPlugin={value}: tasks are not bound to CPUs: a worker may run on any CPU of its node, and " \
                 "cpus_per_task is only what the scheduler reserves", \
        "keep workers.<kind>.torch_threads at most slurm.<group>.cpus_per_task so that workers sharing a node do " \
        "not crowd each other; binding is the admins' (TaskPlugin=task/affinity or task/cgroup)"


def judge_proctrack(cfg: dict[str, str]) -> Result:
    value = cfg.get("ProctrackType", "(null)")
    if "cgroup" in value:
        return OK, f"ProctrackType={value}: every process of a task is tracked, and ends with the job", ""
    return WARN, f"ProctrackType={value}: a process that leaves its task's process tree may outlive scancel", \
        "srl-hpc's workers start none; processes of your own (an env's server) end with their worker only if they " \
        "stay its children"


def judge_mpi_default(cfg: dict[str, str], mpi: str, layout: str = "hetjob") -> Result:
    value = cfg.get("MpiDefault", "(null)")
    if layout == "jobs":
        return OK, f"MpiDefault={value}; each group's srun line says --mpi=none itself (slurm.layout: jobs: MPI " \
                   "cannot span jobs)", ""
    return OK, f"MpiDefault={value}; the job's srun lines say --mpi={mpi} (slurm.mpi) themselves", ""


def judge_het_steps(cfg: dict[str, str], layout: str) -> Result:
    """SchedulerParameters' disable_hetero_steps forbids the one srun over every group of the hetjob layout;
    the jobs layout runs one srun per group's job, and needs no het step."""
    shown = f"SchedulerParameters={cfg.get('SchedulerParameters') or '(null)'}"
    if not accounting.het_steps_disabled(cfg):
        return OK, f"{shown}: het steps allowed (no disable_hetero_steps)", ""
    if layout == "jobs":
        return OK, f"{shown}: het steps are disabled, and not needed: slurm.layout: jobs runs one srun per " \
                   "group's job", ""
    return FAIL, f"{shown}: disable_hetero_steps: no srun may span a het job's components, and slurm.layout: " \
                 "hetjob runs one srun over every group", \
        "set slurm.layout: jobs (one ordinary job per group, the workers meeting through files)"


def nofile_propagated(cfg: dict[str, str]) -> bool:
    """Whether the submitting shell's open-files limits go with the job (PropagateResourceLimits[Except];
    Slurm's default propagates all)."""
    exc = cfg.get("PropagateResourceLimitsExcept")
    if not _unset(exc):
        names = {n.strip().upper() for n in exc.split(",")}
        return not ({"NOFILE", "ALL"} & names)
    prop = cfg.get("PropagateResourceLimits")
    if _unset(prop):
        return True
    names = {n.strip().upper() for n in prop.split(",")}
    return "ALL" in names or "NOFILE" in names


def judge_propagation(cfg: dict[str, str], here: tuple[int, int]) -> Result:
    """here: this shell's (soft, hard) RLIMIT_NOFILE."""
    shown = ", ".join(f"{k}={cfg[k]}" for k in ("PropagateResourceLimits", "PropagateResourceLimitsExcept") if k in cfg)
    soft, hard = (_limit(v) for v in here)
    if nofile_propagated(cfg):
        return OK, f"{shown or 'PropagateResourceLimits (default ALL)'}: the tasks get this shell's open-files " \
                   f"limits (soft {soft}, hard {hard}) where the nodes allow them", ""
    return OK, f"{shown}: open-files limits are not taken from this shell; the tasks get the nodes' own " \
               "(each group's line below)", ""


def judge_enforce(cfg: dict[str, str]) -> Result:
    value = cfg.get("AccountingStorageEnforce", "(null)")
    if _unset(value) or value == "0":
        return OK, f"AccountingStorageEnforce={value}: no association or QOS limit holds jobs back", ""
    return OK, f"AccountingStorageEnforce={value}: " + \
        ("QOS and association limits are enforced (below)" if accounting.limits_enforced(cfg)
         else "submitting needs an association; limits are not enforced"), ""


def judge_limits(plan: planning.Plan, cfg: dict[str, str], read: accounting.Limits | str) -> list[Result]:
    """The user's association and QOS limits on job counts against what the layout counts (a het job: one per
    component), by launcher.accounting's rules, the ones that refuse a run before it is submitted. read: what
    read_limits read (enforced or not), or why it could not."""
    if not accounting.has_accounting(cfg):
        return [(OK, f"no accounting (AccountingStorageType={cfg.get('AccountingStorageType', 'unset')}): no QOS or "
                     f"association limit counts this run's {counted_text(plan)}", "")]
    if isinstance(read, str):
        return [(WARN, f"accounting exists, but its limits could not be read: {read}",
                 "`sacctmgr show assoc user=$USER` and `sacctmgr show qos` list them; a het job counts one job per "
                 "component toward MaxJobs/MaxSubmit")]
    user, mine, enforced = read.user, accounting.associations_here(read), accounting.enforced(cfg)
    if not mine:
        status = FAIL if "associations" in enforced else WARN
        why = ": sbatch refuses every job (AccountingStorageEnforce=associations)" if status == FAIL else ""
        return [(status, f"user {user} has no association in the cluster's accounting{why}",
                 f"ask the admins to add you to an account (sacctmgr add user {user} account=ACCOUNT)")]
    # per association and per QOS: the groups whose jobs count there
    by_association: dict[accounting.Association, list[str]] = {}
    by_qos: dict[str, list[str]] = {}
    strangers: dict[str, list[str]] = {}  # account -> the groups that ask for it without an association
    refused: dict[tuple[str, accounting.Association], list[str]] = {}  # a QOS the association may not use
    for g in plan.groups:
        association = accounting.association_for(read, g.account or plan.account, g.partition)
        if association is None:
            strangers.setdefault(accounting.account_of(read, g.account or plan.account), []).append(g.name)
            continue
        by_association.setdefault(association, []).append(g.name)
        name = accounting.qos_of(association, g.qos or plan.qos)
        if "qos" in enforced and association.qos and name not in association.qos:
            refused.setdefault((name, association), []).append(g.name)
        else:
            by_qos.setdefault(name, []).append(g.name)
    out: list[Result] = []
    for (name, association), names in refused.items():
        out.append((FAIL, f"het group(s) {', '.join(names)} ask for QOS '{name}', which account "
                          f"'{association.account}' may not use (it may: {', '.join(association.qos)}): sbatch "
                          f"refuses the job", "set slurm.qos (or slurm.<group>.qos) to one of them"))
    for account, names in strangers.items() if "associations" in enforced else ():  # (else Slurm takes them)
        out.append((FAIL, f"het group(s) {', '.join(names)}: user {user} has no association with account "
                          f"'{account}' (in their partitions): sbatch refuses the job",
                    f"set slurm.account (or slurm.<group>.account) to one of yours: "
                    f"{', '.join(sorted({a.account for a in mine}))}"))
    if not accounting.limits_enforced(cfg):
        return out + [(OK, f"limits are not enforced (AccountingStorageEnforce={cfg.get('AccountingStorageEnforce')})"
                           f": MaxJobs/MaxSubmit do not hold this run's {counted_text(plan)} back", "")]
    for association, names in sorted(by_association.items(), key=lambda kv: (kv[0].account, kv[0].partition)):
        where = f"association {user}/{association.account}" + \
            (f"/{association.partition}" if association.partition else "")
        out.append(_count_limit(where, len(names), accounting.queued_under(read, association), association.max_jobs,
                                association.max_submit, "MaxJobs", "MaxSubmit", "AssocMaxJobsLimit", "slurm.account",
                                plan.layout))
    for name, names in sorted(by_qos.items()):
        qos = read.qos.get(name)
        if qos is None:
            out.append((WARN, f"QOS '{name}' is not among the cluster's ({', '.join(sorted(read.qos)) or 'none'})",
                        "set slurm.qos to one of them"))
            continue
        out.append(_count_limit(f"QOS '{name}'", len(names), accounting.queued_in_qos(read, name), qos.max_jobs_pu,
                                qos.max_submit_pu, "MaxJobsPerUser", "MaxSubmitJobsPerUser", "QOSMaxJobsPerUserLimit",
                                "slurm.qos", plan.layout))
    return out


def _count_limit(where: str, count: int, queued: int, max_jobs: Optional[int], max_submit: Optional[int],
                 jobs_name: str, submit_name: str, reason: str, setting: str, layout: str = "hetjob") -> Result:
    counted = f"this run's het job counts {count} job(s) there (one per het component)" if layout == "hetjob" else \
        f"this run's jobs count {count} job(s) there (one per group)"
    limits_text = f"{jobs_name} {max_jobs if max_jobs is not None else 'unlimited'}, " \
                  f"{submit_name} {max_submit if max_submit is not None else 'unlimited'}"
    fix = f"use a {setting} whose limits allow {count} jobs (sacctmgr show qos), fewer het groups (e.g. " \
          f"workers.eval.count: 0), or ask the admins to raise the limit"
    if max_submit is not None and count > max_submit:
        return FAIL, f"{where}: {limits_text}; {counted}: sbatch refuses it", fix
    if max_jobs is not None and count > max_jobs:
        return FAIL, f"{where}: {limits_text}; {counted}: it can never start (it pends with {reason})", fix
    busy = [f"{submit_name} with your {queued} queued" for limit in [max_submit] if limit is not None
            and queued + count > limit]
    busy += [f"{jobs_name} with your {queued} queued" for limit in [max_jobs] if limit is not None
             and queued + count > limit]
    if busy:
        return WARN, f"{where}: {limits_text}; {counted}, over {' and '.join(busy)} (squeue --me)", \
            "it waits (or is refused) until some of your jobs end"
    return OK, f"{where}: {limits_text}; {counted}", ""


def _limit(value: int) -> str:
    return "unlimited" if value in (None, resource.RLIM_INFINITY) else str(value)


# --------------------------------------------------------------------- what the tasks found, judged

def _compact(names) -> str:
    return ", ".join(wiring.compact(names))


def _by_value(plan_group: planning.HetGroup, facts: dict, value: Callable[[dict], str]) -> str:
    """'v' when every task of the group has the same, else 'actor/0-1: v1; actor/2: v2'."""
    seen: dict[str, list[str]] = {}
    for name in plan_group.workers:
        if name in facts:
            seen.setdefault(value(facts[name]), []).append(name)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{_compact(names)}: {v}" for v, names in seen.items())


def _cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'"""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def judge_reports(plan: planning.Plan, found: dict) -> list[Result]:
    """Every task reported its facts and its results; the missing ones are named (their logs say why)."""
    names = [w for g in plan.groups for w in g.workers]
    missing_facts = [n for n in names if n not in found["facts"]]
    missing_results = [n for n in names if n in found["facts"] and n not in found["results"]]
    out = []
    if missing_facts:
        out.append((FAIL, f"{len(missing_facts)} of {len(names)} tasks never started their probe: "
                          f"{_compact(missing_facts)}",
                    "their logs (logs/<worker>.log in the probe directory) and the job's output say why"))
    if missing_results:
        out.append((FAIL, f"{len(missing_results)} task(s) started but never finished: {_compact(missing_results)}",
                    "their logs (logs/<worker>.log in the probe directory) say where they stopped"))
    return out


def _address_text(f: dict) -> str:
    a = f["address"]
    return f"{f['node']} {a['ip']} ({a['interface'] or 'no interface'}; {a['source']})"


def judge_addresses(plan: planning.Plan, setting: Optional[str], facts: dict) -> list[Result]:
    """Per group: the node and the address `slurm.network` picks on it; a node where it picks none, or a loopback
    address (which a worker refuses when the job has several nodes or, slurm.layout: jobs, the run several jobs,
    and slurm.network is unset)."""
    nodes = {f["node"] for f in facts.values()}
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        failed = {n: f["address_error"] for n, f in mine.items() if f["address_error"]}
        if failed:
            first = next(iter(failed.values()))
            out.append((FAIL, f"group {g.name}: {_compact(failed)}: {first}",
                        f"set {network.SETTING} to an interface (e.g. ib0) or network (10.0.0.0/8) that every node "
                        f"of every group has"))
            continue
        text = _by_value(g, mine, _address_text)
        loop = [n for n, f in mine.items() if f["address"]["loopback"]]
        if loop and (len(nodes) > 1 or plan.layout == "jobs"):
            message = f"group {g.name}: {text}: a loopback address, which the job's other nodes cannot reach" \
                if len(nodes) > 1 else f"group {g.name}: {text}: a loopback address, which the other groups' jobs " \
                                       f"cannot reach once they run on other nodes"
            if setting is None:
                out.append((FAIL, message, f"set {network.SETTING} to the interface that connects the nodes (e.g. "
                                           f"ib0) or its network; each task's interfaces are in its log"))
            else:
                out.append((WARN, message, f"{network.SETTING} names it: only nodes on one host meet there"))
            continue
        out.append((OK, f"group {g.name}: {_compact(mine)} on {text}", ""))
    return out


def judge_cpus(plan: planning.Plan, facts: dict, binds: Optional[bool] = None) -> list[Result]:
    """Per group: the CPUs each task may run on (sched_getaffinity) against slurm.<group>.cpus_per_task, and
    tasks on one node bound to the same CPUs. binds: whether the TaskPlugin binds tasks (None: not known). A
    task given every CPU of its node is unbound only where nothing binds: with two hardware threads per core
    one CPU asked for can be a whole small node's core."""
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        asked = g.cpus_per_task
        unbound = [] if binds else \
            [n for n, f in mine.items() if len(f["cpus"]) >= (f["node_cpus"] or 0) > asked]
        short = [n for n, f in mine.items() if len(f["cpus"]) < asked]
        shared = []
        for n, f in mine.items():
            if n in unbound or (binds is False):
                continue
            for other, h in facts.items():
                if other != n and h["node"] == f["node"] and set(h["cpus"]) & set(f["cpus"]):
                    both = _cpu_list(sorted(set(h["cpus"]) & set(f["cpus"])))
                    shared.append(f"{n} and {other} on {f['node']} (CPUs {both})")
        text = _by_value(g, mine, lambda f: f"{len(f['cpus'])} CPU(s) on {f['node']} [{_cpu_list(f['cpus'])}]")
        head = f"group {g.name} (cpus_per_task {asked}): "
        if short:
            out.append((FAIL, head + f"{_compact(short)} may run on fewer CPUs than asked: {text}",
                        "Slurm gave fewer CPUs than --cpus-per-task: with two hardware threads per core, "
                        "slurm.threads_per_core: 1 (whole cores), or ask the admins about the node's CpuBind"))
        elif unbound:
            out.append((WARN, head + f"{_compact(unbound)} not bound: each may run on all "
                                     f"{mine[unbound[0]]['node_cpus']} CPUs of its node ({text})",
                        "TaskPlugin above: without binding, keep workers.<kind>.torch_threads at most cpus_per_task"))
        elif shared and not g.overcommit:
            out.append((WARN, head + f"bound, but tasks share CPUs: {'; '.join(shared[:4])}",
                        "two tasks on one node share the CPUs Slurm bound them to (overcommit, or nodes declaring "
                        "more CPUs than they have): they run at half speed each"))
        else:
            more = any(len(f["cpus"]) > asked for f in mine.values())
            out.append((OK, head + f"bound to {text}" + ("; more than asked: the hardware threads of whole cores"
                                                          if more else ""), ""))
    return out


def _gpu_identity(f: dict) -> Optional[str]:
    pick = f.get("gpu_pick") or {}
    return f"{f['node']}/{pick['uuid']}" if pick.get("uuid") else None


def _gpu_text(f: dict) -> str:
    env = f["gpus"]["env"]
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if v) or "no GPU variable set"
    view = f["gpus"].get("torch")
    if view is None:
        return shown
    if "error" in view:
        return f"{shown}; {view['error']}"
    if view["devices"]:
        return f"{shown}; torch sees " + ", ".join(f"{d['index']}: {d['uuid']}" for d in view["devices"])
    return f"{shown}; torch sees no CUDA device" + (f" ({view['why_none']})" if view.get("why_none") else "")


def judge_gpus(plan: planning.Plan, exp: config.Experiment, facts: dict) -> list[Result]:
    """Per group: the GPUs each task sees (Slurm's variables, torch's UUIDs); a CUDA worker without a GPU it
    can take, and two CUDA workers on one physical GPU (unless the group's share_gpu says they may)."""
    by_gpu: dict[str, list[str]] = {}
    for n, f in facts.items():
        identity = _gpu_identity(f)
        if identity:
            by_gpu.setdefault(identity, []).append(n)
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        cuda = [n for n, f in mine.items() if f["device"].startswith("cuda")]
        given = any(v for f in mine.values() for v in f["gpus"]["env"].values())
        head = f"group {g.name}: "
        if not cuda and not given and not g.gpus_per_node:
            out.append((OK, head + "no GPU asked for, none given", ""))
            continue
        text = _by_value(g, mine, _gpu_text)
        failed = {n: mine[n]["gpu_pick"]["error"] for n in cuda if (mine[n].get("gpu_pick") or {}).get("error")}
        if failed:
            n, why = next(iter(failed.items()))
            out.append((FAIL, head + f"{_compact(failed)} on device cuda cannot take a GPU: {why}",
                        f"give the group GPUs (slurm.{g.name}.gpus_per_node, at most one CUDA worker per GPU), a CUDA "
                        f"build of torch where the workers run, or slurm.{g.name}.share_gpu: true"))
            continue
        crowded = [(gpu, names) for gpu, names in by_gpu.items() if len(names) > 1 and set(names) & set(cuda)]
        share = getattr(exp.slurm, g.name).share_gpu
        if crowded and not share:
            gpu, names = crowded[0]
            out.append((FAIL, head + f"{', '.join(names)} would use one physical GPU ({gpu})",
                        f"give each CUDA worker its own GPU (slurm.{g.name}.gpus_per_node, tasks_per_node), or "
                        f"slurm.{g.name}.share_gpu: true if they may share"))
            continue
        sharing = ", ".join(n for _, names in crowded for n in names)
        note = f"; {sharing} share GPUs, as share_gpu allows" if crowded else ""
        picks = [f"{n} -> {mine[n]['gpu_pick']['uuid']}" for n in cuda if (mine[n].get("gpu_pick") or {}).get("uuid")]
        out.append((OK, head + text + (f"; CUDA workers take: {', '.join(picks)}" if picks else "") + note, ""))
    return out


def judge_nofile(plan: planning.Plan, facts: dict) -> list[Result]:
    """Per group: the soft and hard open-files limits inside the tasks against what each worker needs
    (srl_hpc.services.limits.descriptors_needed): the worker raises its soft limit to the hard one at start,
    so only a hard limit under the need fails."""
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        low = [(n, f["nofile"]) for n, f in mine.items()
               if f["nofile"]["hard"] is not None and f["nofile"]["hard"] < f["nofile"]["needed"]]
        if low:
            n, lim = max(low, key=lambda item: item[1]["needed"])
            out.append((FAIL, f"group {g.name}: " + limits.too_few_files(n, lim["needed"], lim["workers"], lim["hard"]),
                        "raise the hard open-files limit on the nodes (the cluster's admins), or give each server "
                        "fewer clients (more policy workers or trainers)"))
            continue
        text = _by_value(g, mine, lambda f: f"soft {_limit(f['nofile']['soft'])}, hard {_limit(f['nofile']['hard'])}")
        worst = max(mine, key=lambda n: mine[n]["nofile"]["needed"])
        need = mine[worst]["nofile"]["needed"]
        raised = any(f["nofile"]["soft"] is not None and f["nofile"]["soft"] < f["nofile"]["needed"]
                     for f in mine.values())
        out.append((OK, f"group {g.name}: open files {text}; the most a worker here needs is about {need} ({worst})"
                        + ("; the workers raise their soft limit to the hard one at start" if raised else ""), ""))
    return out


def judge_rendezvous(plan: planning.Plan, found: dict) -> Result:
    results = found["results"]
    errors = {n: r["rendezvous"]["error"] for n, r in results.items() if (r.get("rendezvous") or {}).get("error")}
    if errors:
        n, why = next(iter(errors.items()))
        return FAIL, f"file rendezvous in the probe directory: {_compact(errors)} gave up: {why}", \
            "every node must see the run directory (a shared filesystem) and every task must start: the logs of " \
            "those named say why"
    if not results:
        return FAIL, "file rendezvous: no task got that far", "the tasks' logs say why"
    slowest = max(r["rendezvous"]["seconds"] for r in results.values() if r.get("rendezvous"))
    return OK, f"file rendezvous in the probe directory (shared filesystem): all {len(results)} tasks met within " \
               f"{slowest:.1f} s", ""


def judge_pings(plan: planning.Plan, found: dict) -> list[Result]:
    """A ZMQ request and reply (the run's CURVE keys, slurm.ports) between every pair of groups, both ways: the
    first task of each group pinged every task of the others."""
    facts, results = found["facts"], found["results"]
    groups = [g for g in plan.groups]
    if len(groups) < 2:
        return [(OK, "ZMQ: one het group only, no pair of groups to try", "")]
    pinger = {g.name: g.workers[0] for g in groups}
    out = []
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            failures, times, asked = [], [], []
            unmeasured = []
            for src, dst in ((a, b), (b, a)):
                pings = (results.get(pinger[src.name]) or {}).get("pings")
                if pings is None:
                    unmeasured.append(f"{pinger[src.name]} did not ping (it never got past the rendezvous)")
                    continue
                asked.append(f"{pinger[src.name]} -> {len(dst.workers)} {dst.name} task(s)")
                for target in dst.workers:
                    answer = pings.get(target, {"error": "not pinged"})
                    if "ms" in answer:
                        times.append(answer["ms"])
                    else:
                        where = facts.get(target, {}).get("node", "?")
                        failures.append(f"{pinger[src.name]} -> {target} on {where}: {answer['error']}")
            head = f"ZMQ between {a.name} and {b.name}: "
            if failures:
                out.append((FAIL, head + "; ".join(failures[:4]) + (f" (and {len(failures) - 4} more)"
                                                                     if len(failures) > 4 else ""),
                            f"the nodes of the two groups must reach each other on {network.SETTING}'s addresses "
                            f"(a firewall between partitions: slurm.ports for a range the site opens; or an interface "
                            f"one side lacks)"))
            elif unmeasured:
                out.append((FAIL, head + "not measured: " + "; ".join(unmeasured), "the logs of those named say why"))
            else:
                out.append((OK, head + f"every task answered ({', '.join(asked)}), slowest round trip "
                                       f"{max(times):.1f} ms", ""))
    return out


def judge_collectives(plan: planning.Plan, exp: config.Experiment, found: dict) -> list[Result]:
    """gloo all-reduce among each policy's trainers (as their DDP joins), and NCCL where they have GPUs."""
    facts, results = found["facts"], found["results"]
    trainers = [n for g in plan.groups for n in g.workers if n.startswith("trainer/")]
    if not trainers:
        return []
    groups: dict[tuple, list[str]] = {}
    for n in trainers:
        c = (results.get(n) or {}).get("collective")
        if c is not None and "peers" in c:
            groups.setdefault(tuple(c["peers"]), []).append(n)
    out = []
    missing = [n for n in trainers if not any(n in peers for peers in groups)]
    if missing:
        why = [((results.get(n) or {}).get("collective") or {}).get("gloo", {}).get("error") for n in missing]
        out.append((FAIL, f"gloo all-reduce: {_compact(missing)} did not take part"
                          + (f": {next(w for w in why if w)}" if any(why) else " (never got past the rendezvous)"),
                    "their logs say why"))
    for peers, _ in groups.items():
        where = ", ".join(f"{p} on {facts.get(p, {}).get('node', '?')}" for p in peers)
        interface = next((facts[p]["address"]["interface"] for p in peers
                          if facts.get(p, {}).get("address")), None)
        gloo = {p: (results.get(p) or {}).get("collective", {}).get("gloo") or {"error": "no result"} for p in peers}
        bad = {p: r["error"] for p, r in gloo.items() if "error" in r}
        head = f"gloo all-reduce among {len(peers)} trainer task(s) ({where})"
        if bad:
            p, why = next(iter(bad.items()))
            out.append((FAIL, f"{head}: {p}: {why}",
                        f"the trainers' nodes must reach each other on {network.SETTING}'s interface "
                        f"(GLOO_SOCKET_IFNAME is set to it), and the first trainer's store port (within slurm.ports, "
                        f"if set) must be open"))
        else:
            slowest = max(r["seconds"] for r in gloo.values())
            out.append((OK, f"{head}" + (f" over {interface}" if interface else "") +
                            f": the sum is right on every rank, within {slowest:.2f} s", ""))
        nccl = {p: (results.get(p) or {}).get("collective", {}).get("nccl") for p in peers}
        devices = {facts.get(p, {}).get("device", "cpu") for p in peers}
        if all(v is None for v in nccl.values()):
            if any(d.startswith("cuda") for d in devices):
                out.append((FAIL, f"NCCL among {', '.join(peers)}: not tried: not every one of them has a GPU it can "
                                  "take (the GPU lines above)",
                            "give each trainer a GPU (slurm.trainer.gpus_per_node)"))
            else:
                out.append((OK, "NCCL: not needed: the trainers run on cpu (gloo, above, is what their DDP uses)", ""))
            continue
        skipped = next((r["skipped"] for r in nccl.values() if r and "skipped" in r), None)
        bad = {p: r["error"] for p, r in nccl.items() if r and "error" in r}
        if skipped:
            out.append((WARN, f"NCCL among {', '.join(peers)}: {skipped}", "give each trainer its own GPU for NCCL"))
        elif bad:
            p, why = next(iter(bad.items()))
            out.append((FAIL, f"NCCL all-reduce among {', '.join(peers)}: {p}: {why}",
                        f"NCCL_SOCKET_IFNAME is {network.SETTING}'s interface; NCCL_DEBUG=INFO in slurm.env shows "
                        f"which transport failed"))
        else:
            slowest = max(r["seconds"] for r in nccl.values() if r)
            out.append((OK, f"NCCL all-reduce among {len(peers)} trainer GPU(s): the sum is right on every rank, "
                            f"within {slowest:.2f} s", ""))
    return out


def judge_mpi(plan: planning.Plan, found: dict) -> Result:
    """The workers' MPI rendezvous (MPI_Init under srun --mpi=<slurm.mpi>, one allgather), last in every task;
    judged once the job has ended, so a phase still "started" never ended."""
    if plan.layout == "jobs":
        return OK, "MPI rendezvous: not used: slurm.layout: jobs meets through files (the file rendezvous above)", ""
    if plan.mpi == "none":
        return OK, "slurm.mpi: none: workers meet through files (the file rendezvous above), no MPI", ""
    names = [w for g in plan.groups for w in g.workers]
    states = {n: (found["results"].get(n) or {}).get("mpi") for n in names}
    failed = {n: s["error"] for n, s in states.items() if s and s.get("state") == "failed"}
    hung = [n for n, s in states.items() if s and s.get("state") == "started"]
    absent = [n for n, s in states.items() if s is None]
    head = f"MPI rendezvous (srun --mpi={plan.mpi}, MPI_Init and one allgather, as the workers do)"
    if failed:
        n, why = next(iter(failed.items()))
        return FAIL, f"{head}: {_compact(failed)}: {why}", RANKS_FIX
    if hung:
        return FAIL, f"{head}: {_compact(hung)} never finished it (within {tasks.MPI_BOUND:.0f} s; their logs hold " \
                     f"the stack where they waited)", RANKS_FIX
    if absent:
        return FAIL, f"{head}: not reached by {_compact(absent)}", "their logs say why"
    done = [s for s in states.values() if s]
    ranks = {s.get("ranks") for s in done}
    return OK, f"{head}: all {len(names)} tasks in one world ({done[0].get('library', '?')}), within " \
               f"{max(s['seconds'] for s in done):.1f} s" + ("" if ranks == {len(names)} else f" (ranks {ranks})"), ""


def judge_job(job_id: str, groups: int, state: str, found: dict, names: list[str],
              jobs: Optional[dict[str, tuple[str, str]]] = None) -> Result:
    """The het job itself: that its components ran together and one srun step spanned them (a task of every
    group started) is the proof that this cluster takes het jobs and het steps; missing tasks are
    judge_reports'. jobs (slurm.layout: jobs): group -> (its job, the state it ended in): judge_group_jobs."""
    if jobs is not None:
        return judge_group_jobs(jobs, found, names)
    reported_groups = {f["group"] for f in found["facts"].values()}
    if len(reported_groups) == groups:
        return OK, f"het job {job_id}: its {groups} component(s) ran together and one srun step spanned them " \
                   f"({len(found['facts'])} of {len(names)} tasks started): heterogeneous jobs and steps work here", ""
    return FAIL, f"het job {job_id} ended {state} with {len(found['facts'])} of {len(names)} tasks started " \
                 f"({len(reported_groups)} of {groups} groups)", \
        "Slurm's word on the job and the tasks' logs are below"


def judge_group_jobs(jobs: dict[str, tuple[str, str]], found: dict, names: list[str]) -> Result:
    """slurm.layout: jobs: each group's ordinary job ran (a task of it started) and their tasks met through files
    in the probe directory, or the groups whose jobs started no task, with how those jobs ended."""
    shown = "jobs " + ", ".join(f"{job} ({group})" for group, (job, _) in jobs.items())
    reported_groups = {f["group"] for f in found["facts"].values()}
    started = f"{len(found['facts'])} of {len(names)} tasks started"
    idle = [group for group in jobs if group not in reported_groups]
    if idle:
        return FAIL, f"{shown}: " + "; ".join(f"group {g}'s job {jobs[g][0]} started no task (Slurm: {jobs[g][1]})"
                                              for g in idle) + f" ({started})", \
            "Slurm's word on each job and the tasks' logs are below"
    met = all("error" not in ((found["results"].get(n) or {}).get("rendezvous") or {"error": ""}) for n in names)
    return OK, f"{shown}: each group's ordinary job ran" + \
        (" and their tasks met through files in the probe directory" if met else
         " (whether their tasks met: the file rendezvous line below)") + f" ({started})", ""


def refusal_fix(message: str) -> str:
    """What to do about sbatch's refusal, by what Slurm said."""
    text = message.lower()
    if "heterogeneous" in text or "hetjob" in text or "het job" in text:
        return ("this cluster does not take heterogeneous jobs: set slurm.layout: jobs (one ordinary job per group, "
                "the workers meeting through files), or ask the admins whether het jobs can be enabled for you")
    if "qos" in text or "maxsubmit" in text or "association" in text:
        return "the QOS or association lines above say which limit; slurm.qos / slurm.account choose another"
    if "account" in text:
        return "set slurm.account to one of yours (sacctmgr show assoc user=$USER)"
    if "partition" in text:
        return "slurm.<group>.partition must name a partition you may use (sinfo -s lists them)"
    return "the experiment's own submission would meet the same refusal: change what Slurm names and probe again"


# ---------------------------------------------------------------------------------------- side effects

def slurm_config() -> dict[str, str] | str:
    try:
        return accounting.parse_config(slurm._run(["scontrol", "show", "config"]).stdout)
    except slurm.SlurmError as e:
        return str(e)


def read_limits(cfg: dict[str, str]) -> accounting.Limits | str:
    """The user's limits as launcher.slurm.check_limits reads them, but read even where they are not enforced
    (judge_limits says so), or the command that gave no answer."""
    silent: list[str] = []

    def ask(cmd: list[str]) -> Optional[str]:
        answer = slurm._answer(cmd)
        if answer is None:
            silent.append(shlex.join(cmd))
        return answer

    read = accounting.ask_limits(cfg, ask)
    return read if read is not None else f"`{silent[0]}` failed or did not answer"


def _say(text: str) -> None:
    print(f"probe: {text}", file=sys.stderr, flush=True)


def run(exp: config.Experiment, given_dir: Optional[Path], command: str, wait: float = WAIT,
        say: Callable[[str], None] = _say) -> Iterator[Result]:
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
        yield FAIL, f"the experiment's job could not be checked against the cluster: {e}", \
            "run the probe on the cluster's login node"
        return
    yield from judge_limits(request.plan, cfg, read_limits(cfg) if accounting.has_accounting(cfg) else "")
    if het_steps[0] == FAIL:  # (prepare refuses it too; a job without its srun would only wait for its limit)
        return

    job_plan = probe_plan(request.plan)
    try:
        if job_plan.layout == "jobs":
            scripts = probe_scripts(job_plan, command)
            job = dataclasses.replace(request, plan=job_plan, script=render.every_script(scripts),
                                      scripts=tuple(scripts))
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
            yield FAIL, f"sbatch refused the probe's jobs (slurm.layout: jobs, {len(job.scripts)} groups): {e}", \
                refusal_fix(str(e))
            return
        said = str(e).split(": ", 1)[-1] if "failed (exit" in str(e) else str(e)
        yield FAIL, f"sbatch refused the probe's het job ({len(job_plan.groups)} components): {said}", refusal_fix(said)
        return
    groups = slurm.group_jobs(run_dir)
    if groups:
        say(f"submitted jobs {', '.join(f'{j} ({g})' for g, j in groups.items())} ({job_plan.ntasks} tasks, one "
            f"job per group); directory {root}")
    else:
        say(f"submitted job {job_id} ({job_plan.ntasks} tasks in {len(job_plan.groups)} het groups); directory {root}")
    state, gave_up = follow(job_id, run_dir, job_plan, wait, say)
    names = [w for g in job_plan.groups for w in g.workers]
    found = tasks.collect(root, names)
    if gave_up:
        yield gave_up
    explained, jobs = [job_id], None
    if groups:  # how each group's job ended: the ones that did not complete are explained
        infos = slurm.job_states(list(groups.values()))
        jobs = {g: (j, infos[j].raw) for g, j in groups.items()}
        explained = [j for j in groups.values() if infos[j].state != "completed"] or list(groups.values())
    yield judge_job(job_id, len(job_plan.groups), state, found, names, jobs)
    if len(found["facts"]) < len(names) or len(found["results"]) < len(names):
        yield from judge_reports(job_plan, found)
        yield from explain_end(explained, run_dir, [n for n in names if n not in found["results"]])
    if found["facts"]:
        yield from judge_found(job_plan, exp, found, binds(cfg))
    say(f"the probe's files are in {root}")


def judge_found(plan: planning.Plan, exp: config.Experiment, found: dict, binds: Optional[bool] = None) -> list[Result]:
    """Every judgement of what the tasks wrote (srl_hpc.probe.collect), in the order they are printed."""
    return [*judge_addresses(plan, exp.slurm.network, found["facts"]), *judge_cpus(plan, found["facts"], binds),
            *judge_gpus(plan, exp, found["facts"]), *judge_nofile(plan, found["facts"]),
            judge_rendezvous(plan, found), *judge_pings(plan, found), *judge_collectives(plan, exp, found),
            judge_mpi(plan, found)]


def _reported(run_dir: RunDir) -> int:
    """Tasks that have ended every phase: one directory listing."""
    try:
        return len([f for f in os.listdir(tasks.ProbeDir(run_dir.root).done) if not f.startswith(".")])
    except OSError:
        return 0


def follow(job_id: str, run_dir: RunDir, plan: planning.Plan, wait: float, say) -> tuple[str, Optional[Result]]:
    """Until the job ends (with slurm.layout: jobs, every group's job: slurm.json lists them), at most `wait`
    seconds, asking Slurm as launcher.slurm.Watch does; tasks' reports as they come. Jobs still pending or
    running then are cancelled (the second value says so); so are ones that outlive every task's report by
    AFTER_REPORTS seconds (a hung srun)."""
    names = [w for g in plan.groups for w in g.workers]
    ids, groups = slurm.jobs_of(run_dir), slurm.group_jobs(run_dir)
    what = f"job {job_id} was" if not groups else f"jobs {', '.join(ids)} were"
    counts = {"reported": 0, "all_since": None}

    def all_reported() -> bool:
        return counts["reported"] == len(names)

    def cancel_live() -> dict[str, slurm.JobInfo]:
        """Slurm's word on each job just before the live ones are cancelled."""
        infos = slurm.job_states(ids)
        live = [i for i in ids if infos[i].state not in slurm.FINISHED]
        if live:
            slurm.cancel(*live)
        return infos

    watch = slurm.Watch(lambda: ids, ending=all_reported, say=say, groups=lambda: groups,
                        started=lambda job: run_dir.slurm_output(job).exists())
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
                return "CANCELLED", (WARN, f"{what} still {watch.state} {AFTER_REPORTS:.0f} s after every task had "
                                           f"reported; cancelled",
                                     "an srun that outlives its step (srl_hpc/srun_guard.py ends those in runs)")
            if time.monotonic() > deadline:
                infos = cancel_live()
                _, info = slurm.current(ids, infos, together=bool(groups))
                now = slurm.groups_line(groups, infos) if groups else f"job {job_id} was {info.line()}"
                return info.raw, (FAIL, f"the probe gave up after {wait:.0f} s: {now}; cancelled",
                                  "the cluster is busy or the job cannot start (the reason above): probe again with "
                                  "a longer --probe-wait, or change what the reason names")
            time.sleep(1.0)
    except BaseException:
        slurm.cancel(*ids)  # Ctrl-C or an error: never leave the probe's jobs behind
        raise


def explain_end(job_ids: list[str], run_dir: RunDir, missing: list[str]) -> Iterator[Result]:
    """Slurm's word on how each job (the jobs layout: each group's job that did not complete) ended, the last
    lines of the missing tasks' logs and of each job's output."""
    for job_id in job_ids:
        for line in slurm.job_end(job_id):
            yield WARN, line, f"the job's output: {run_dir.slurm_output(job_id)}"
    for name in missing[:3]:
        yield WARN, f"{name}'s log ({run_dir.log(name)}), last lines: " + \
            " | ".join(tail(run_dir.log(name), 5).splitlines()), "it says why the task stopped"
    for job_id in job_ids:
        output = run_dir.slurm_output(job_id)
        if output.exists():
            yield WARN, f"the job's output ({output}), last lines: " + " | ".join(tail(output, 5).splitlines()), \
                "the batch script's own errors (slurm.setup, the container) show there"
