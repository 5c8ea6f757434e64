"""doctor --probe: the cluster's settings that matter to a run, judged before its probe job is submitted
(TaskPlugin, ProctrackType, MpiDefault, het steps, limits propagation, accounting and the user's QOS and
association limits against the jobs the layout counts). Pure judging functions of `scontrol show config`'s
settings, and the two readers that ask Slurm for them."""

from __future__ import annotations

import resource
import shlex

from launcher import accounting, slurm
from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result


def jobs_counted(plan: planning.Plan) -> int:
    """Jobs the run counts toward MaxJobs / MaxSubmit: a het job counts one per component, and the jobs
    layout is a job per group."""
    return len(plan.groups)


def counted_text(plan: planning.Plan) -> str:
    """'3 het components', or '3 jobs (one per group)' with slurm.layout: jobs."""
    if plan.layout == "jobs":
        return f"{jobs_counted(plan)} jobs (one per group)"
    return f"{jobs_counted(plan)} het components"


def _unset(value: str | None) -> bool:
    return value is None or value in ("(null)", "", "none", "None", "(null type)")


def binds(cfg: dict[str, str]) -> bool:
    return any(p in cfg.get("TaskPlugin", "") for p in ("task/affinity", "task/cgroup"))


def judge_task_plugin(cfg: dict[str, str]) -> Result:
    value = cfg.get("TaskPlugin", "(null)")
    if binds(cfg):
        return OK, f"TaskPlugin={value}: tasks are bound to the CPUs they were given (each group's CPUs below)", ""
    return (
        WARN,
        f"TaskPlugin={value}: tasks are not bound to CPUs: a worker may run on any CPU of its node, and "
        "cpus_per_task is only what the scheduler reserves",
        "keep workers.<kind>.torch_threads at most slurm.<group>.cpus_per_task so that workers sharing a node do "
        "not crowd each other; binding is the admins' (TaskPlugin=task/affinity or task/cgroup)",
    )


def judge_proctrack(cfg: dict[str, str]) -> Result:
    value = cfg.get("ProctrackType", "(null)")
    if "cgroup" in value:
        return OK, f"ProctrackType={value}: every process of a task is tracked, and ends with the job", ""
    return (
        WARN,
        f"ProctrackType={value}: a process that leaves its task's process tree may outlive scancel",
        "srl-hpc's workers start none; processes of your own (an env's server) end with their worker only if they "
        "stay its children",
    )


def judge_mpi_default(cfg: dict[str, str], mpi: str, layout: str = "hetjob") -> Result:
    value = cfg.get("MpiDefault", "(null)")
    if layout == "jobs":
        return (
            OK,
            f"MpiDefault={value}; each group's srun line says --mpi=none itself (slurm.layout: jobs: MPI "
            "cannot span jobs)",
            "",
        )
    return OK, f"MpiDefault={value}; the job's srun lines say --mpi={mpi} (slurm.mpi) themselves", ""


def judge_het_steps(cfg: dict[str, str], layout: str) -> Result:
    """SchedulerParameters' disable_hetero_steps forbids the one srun over every group of the hetjob layout;
    the jobs layout runs one srun per group's job, and needs no het step."""
    shown = f"SchedulerParameters={cfg.get('SchedulerParameters') or '(null)'}"
    if not accounting.het_steps_disabled(cfg):
        return OK, f"{shown}: het steps allowed (no disable_hetero_steps)", ""
    if layout == "jobs":
        return (
            OK,
            f"{shown}: het steps are disabled, and not needed: slurm.layout: jobs runs one srun per group's job",
            "",
        )
    return (
        FAIL,
        f"{shown}: disable_hetero_steps: no srun may span a het job's components, and slurm.layout: "
        "hetjob runs one srun over every group",
        "set slurm.layout: jobs (one ordinary job per group, the workers meeting through files)",
    )


def nofile_propagated(cfg: dict[str, str]) -> bool:
    """Whether the submitting shell's open-files limits go with the job (PropagateResourceLimits[Except];
    Slurm's default propagates all)."""
    exc = cfg.get("PropagateResourceLimitsExcept")
    if not _unset(exc):
        assert exc is not None  # _unset(None)
        names = {n.strip().upper() for n in exc.split(",")}
        return not ({"NOFILE", "ALL"} & names)
    prop = cfg.get("PropagateResourceLimits")
    if _unset(prop):
        return True
    assert prop is not None  # _unset(None)
    names = {n.strip().upper() for n in prop.split(",")}
    return "ALL" in names or "NOFILE" in names


def judge_propagation(cfg: dict[str, str], here: tuple[int, int]) -> Result:
    """here: this shell's (soft, hard) RLIMIT_NOFILE."""
    shown = ", ".join(f"{k}={cfg[k]}" for k in ("PropagateResourceLimits", "PropagateResourceLimitsExcept") if k in cfg)
    soft, hard = (limit_text(v) for v in here)
    if nofile_propagated(cfg):
        return (
            OK,
            f"{shown or 'PropagateResourceLimits (default ALL)'}: the tasks get this shell's open-files "
            f"limits (soft {soft}, hard {hard}) where the nodes allow them",
            "",
        )
    return (
        OK,
        f"{shown}: open-files limits are not taken from this shell; the tasks get the nodes' own "
        "(each group's line below)",
        "",
    )


def judge_enforce(cfg: dict[str, str]) -> Result:
    value = cfg.get("AccountingStorageEnforce", "(null)")
    if _unset(value) or value == "0":
        return OK, f"AccountingStorageEnforce={value}: no association or QOS limit holds jobs back", ""
    return (
        OK,
        f"AccountingStorageEnforce={value}: "
        + (
            "QOS and association limits are enforced (below)"
            if accounting.limits_enforced(cfg)
            else "submitting needs an association; limits are not enforced"
        ),
        "",
    )


def judge_limits(plan: planning.Plan, cfg: dict[str, str], read: accounting.Limits | str) -> list[Result]:
    """The user's association and QOS limits on job counts against what the layout counts (a het job: one per
    component), by launcher.accounting's rules, the ones that refuse a run before it is submitted. read: what
    read_limits read (enforced or not), or why it could not."""
    if not accounting.has_accounting(cfg):
        return [
            (
                OK,
                f"no accounting (AccountingStorageType={cfg.get('AccountingStorageType', 'unset')}): no QOS or "
                f"association limit counts this run's {counted_text(plan)}",
                "",
            )
        ]
    if isinstance(read, str):
        return [
            (
                WARN,
                f"accounting exists, but its limits could not be read: {read}",
                "`sacctmgr show assoc user=$USER` and `sacctmgr show qos` list them; a het job counts one job per "
                "component toward MaxJobs/MaxSubmit",
            )
        ]
    user, mine, enforced = read.user, accounting.associations_here(read), accounting.enforced(cfg)
    if not mine:
        status = FAIL if "associations" in enforced else WARN
        why = ": sbatch refuses every job (AccountingStorageEnforce=associations)" if status == FAIL else ""
        return [
            (
                status,
                f"user {user} has no association in the cluster's accounting{why}",
                f"ask the admins to add you to an account (sacctmgr add user {user} account=ACCOUNT)",
            )
        ]
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
        out.append(
            (
                FAIL,
                f"het group(s) {', '.join(names)} ask for QOS '{name}', which account "
                f"'{association.account}' may not use (it may: {', '.join(association.qos)}): sbatch "
                f"refuses the job",
                "set slurm.qos (or slurm.<group>.qos) to one of them",
            )
        )
    for account, names in strangers.items() if "associations" in enforced else ():  # (else Slurm takes them)
        out.append(
            (
                FAIL,
                f"het group(s) {', '.join(names)}: user {user} has no association with account "
                f"'{account}' (in their partitions): sbatch refuses the job",
                f"set slurm.account (or slurm.<group>.account) to one of yours: "
                f"{', '.join(sorted({a.account for a in mine}))}",
            )
        )
    if not accounting.limits_enforced(cfg):
        return out + [
            (
                OK,
                f"limits are not enforced (AccountingStorageEnforce={cfg.get('AccountingStorageEnforce')})"
                f": MaxJobs/MaxSubmit do not hold this run's {counted_text(plan)} back",
                "",
            )
        ]
    for association, names in sorted(by_association.items(), key=lambda kv: (kv[0].account, kv[0].partition)):
        where = f"association {user}/{association.account}" + (
            f"/{association.partition}" if association.partition else ""
        )
        out.append(
            _count_limit(
                where,
                len(names),
                accounting.queued_under(read, association),
                association.max_jobs,
                association.max_submit,
                "MaxJobs",
                "MaxSubmit",
                "AssocMaxJobsLimit",
                "slurm.account",
                plan.layout,
            )
        )
    for name, names in sorted(by_qos.items()):
        qos = read.qos.get(name)
        if qos is None:
            out.append(
                (
                    WARN,
                    f"QOS '{name}' is not among the cluster's ({', '.join(sorted(read.qos)) or 'none'})",
                    "set slurm.qos to one of them",
                )
            )
            continue
        out.append(
            _count_limit(
                f"QOS '{name}'",
                len(names),
                accounting.queued_in_qos(read, name),
                qos.max_jobs_pu,
                qos.max_submit_pu,
                "MaxJobsPerUser",
                "MaxSubmitJobsPerUser",
                "QOSMaxJobsPerUserLimit",
                "slurm.qos",
                plan.layout,
            )
        )
    return out


def _count_limit(
    where: str,
    count: int,
    queued: int,
    max_jobs: int | None,
    max_submit: int | None,
    jobs_name: str,
    submit_name: str,
    reason: str,
    setting: str,
    layout: str = "hetjob",
) -> Result:
    counted = (
        f"this run's het job counts {count} job(s) there (one per het component)"
        if layout == "hetjob"
        else f"this run's jobs count {count} job(s) there (one per group)"
    )
    limits_text = (
        f"{jobs_name} {max_jobs if max_jobs is not None else 'unlimited'}, "
        f"{submit_name} {max_submit if max_submit is not None else 'unlimited'}"
    )
    fix = (
        f"use a {setting} whose limits allow {count} jobs (sacctmgr show qos), fewer het groups (e.g. "
        f"workers.eval.count: 0), or ask the admins to raise the limit"
    )
    if max_submit is not None and count > max_submit:
        return FAIL, f"{where}: {limits_text}; {counted}: sbatch refuses it", fix
    if max_jobs is not None and count > max_jobs:
        return FAIL, f"{where}: {limits_text}; {counted}: it can never start (it pends with {reason})", fix
    busy = [
        f"{submit_name} with your {queued} queued"
        for limit in [max_submit]
        if limit is not None and queued + count > limit
    ]
    busy += [
        f"{jobs_name} with your {queued} queued" for limit in [max_jobs] if limit is not None and queued + count > limit
    ]
    if busy:
        return (
            WARN,
            f"{where}: {limits_text}; {counted}, over {' and '.join(busy)} (squeue --me)",
            "it waits (or is refused) until some of your jobs end",
        )
    return OK, f"{where}: {limits_text}; {counted}", ""


def limit_text(value: int) -> str:
    return "unlimited" if value in (None, resource.RLIM_INFINITY) else str(value)


def slurm_config() -> dict[str, str] | str:
    try:
        return accounting.parse_config(slurm._run(["scontrol", "show", "config"]).stdout)
    except slurm.SlurmError as e:
        return str(e)


def read_limits(cfg: dict[str, str]) -> accounting.Limits | str:
    """The user's limits as launcher.slurm.check_limits reads them, but read even where they are not enforced
    (judge_limits says so), or the command that gave no answer."""
    silent: list[str] = []

    def ask(cmd: list[str]) -> str | None:
        answer = slurm._answer(cmd)
        if answer is None:
            silent.append(shlex.join(cmd))
        return answer

    read = accounting.ask_limits(cfg, ask)
    return read if read is not None else f"`{silent[0]}` failed or did not answer"
