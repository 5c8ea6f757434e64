"""What a cluster's configuration and accounting allow a run, read before anything is submitted.

Where slurmdbd enforces limits (`AccountingStorageEnforce` with `limits`), each job counts toward the user's
QOS limits `MaxSubmitJobsPerUser` (sacctmgr's MaxSubmitPU) and `MaxJobsPerUser` (MaxJobsPU), and toward the
association's `MaxSubmitJobs` and `MaxJobs`. Each component of a het job counts as a job, and so does each
job of `slurm.layout: jobs`: a run of three groups is three jobs in either layout. Past MaxSubmit sbatch
refuses the job (or, for the jobs layout, the groups after the limit); past MaxJobs the groups cannot all run
at once, and workers that wait for each other at the rendezvous would wait for ever. `limit_problems` names
either before anything is submitted.

The parsers are pure (tests feed them recorded `scontrol`, `sacctmgr` and `squeue` text); `read_limits` asks
Slurm through a function of the caller's (launcher.slurm's, with its time limit), and gives None where the
cluster has no accounting or does not enforce limits: there is then nothing to check. `doctor --probe`
(launcher.probe_settings) judges the same Limits by the same rules, read with `ask_limits` even where they are not
enforced, so that it can say so.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass

from launcher.plan import Plan

# sacctmgr's column lists, in the order the parsers read them
ASSOC_FORMAT = "User,DefaultAccount,Cluster,Account,Partition,QOS,DefaultQOS,MaxJobs,MaxSubmit"
QOS_FORMAT = "Name,MaxJobsPU,MaxSubmitPU"
QUEUE_FORMAT = "%i|%T|%q|%a|%P"  # squeue: id, state, QOS, account, partition


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> {key: value} ('SchedulerParameters = a,b' lines; the first of a key wins)."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            settings.setdefault(key.strip(), value.strip())
    return settings


def het_steps_disabled(settings: dict[str, str]) -> bool:
    """SchedulerParameters has disable_hetero_steps: no srun may span a het job's components, so the hetjob
    layout's one srun over every group cannot start."""
    return "disable_hetero_steps" in settings.get("SchedulerParameters", "").split(",")


def has_accounting(settings: dict[str, str]) -> bool:
    """Accounting through slurmdbd: the only storage sacctmgr answers for, and the only one that enforces."""
    return settings.get("AccountingStorageType", "") == "accounting_storage/slurmdbd"


def enforced(settings: dict[str, str]) -> set[str]:
    """What AccountingStorageEnforce makes slurmctld check, with what each word implies: `safe` implies
    `limits`; `limits` and `qos` imply `associations` (a job needs one). Nothing without accounting."""
    if not has_accounting(settings):
        return set()
    words = set(settings.get("AccountingStorageEnforce", "").split(","))
    if "safe" in words:
        words.add("limits")
    if words & {"limits", "qos"}:
        words.add("associations")
    return words


def limits_enforced(settings: dict[str, str]) -> bool:
    """MaxJobs and MaxSubmit hold jobs back only where limits are enforced."""
    return "limits" in enforced(settings)


@dataclass(frozen=True)
class Association:
    """One of the user's associations (a row of `sacctmgr show user USER withassoc`)."""

    default_account: str
    cluster: str
    account: str
    partition: str  # "": every partition
    qos: tuple[str, ...]  # the QOS it may ask for
    default_qos: str  # "": none set
    max_jobs: int | None
    max_submit: int | None


@dataclass(frozen=True)
class Qos:
    name: str
    max_jobs_pu: int | None
    max_submit_pu: int | None


@dataclass(frozen=True)
class Queued:
    """A job of the user's in the queue (a het component and an array task each count as one)."""

    state: str
    qos: str
    account: str
    partition: str


@dataclass(frozen=True)
class Limits:
    """What Slurm says of the user: associations (every cluster's), every QOS, the user's jobs in the queue."""

    user: str
    cluster: str
    associations: tuple[Association, ...]
    qos: dict[str, Qos]
    queue: tuple[Queued, ...]


def _number(text: str) -> int | None:
    """A limit: a number, or None for sacctmgr's empty field (no limit)."""
    return int(text) if text.strip().isdigit() else None


def parse_associations(text: str) -> list[Association]:
    """`sacctmgr -nP show user USER withassoc format=ASSOC_FORMAT`."""
    rows = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 9:
            continue
        _, default_account, cluster, account, partition, qos, default_qos, max_jobs, max_submit = fields[:9]
        rows.append(
            Association(
                default_account,
                cluster,
                account,
                partition,
                tuple(q for q in qos.split(",") if q),
                default_qos,
                _number(max_jobs),
                _number(max_submit),
            )
        )
    return rows


def parse_qos(text: str) -> dict[str, Qos]:
    """`sacctmgr -nP show qos format=QOS_FORMAT`."""
    table = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 3 and fields[0]:
            table[fields[0]] = Qos(fields[0], _number(fields[1]), _number(fields[2]))
    return table


def parse_queue(text: str) -> list[Queued]:
    """`squeue -u USER -h -r -o QUEUE_FORMAT`."""
    return [
        Queued(*fields[1:5]) for fields in (line.strip().split("|") for line in text.splitlines()) if len(fields) >= 5
    ]


def associations_here(limits: Limits) -> list[Association]:
    """The user's associations on this cluster (sacctmgr lists every cluster's); none: where associations are
    enforced sbatch refuses every job of the user's."""
    return [a for a in limits.associations if not limits.cluster or a.cluster == limits.cluster]


def account_of(limits: Limits, asked: str | None) -> str:
    """The account a job runs under: the one it asks for, else the user's default."""
    mine = associations_here(limits)
    return asked or (mine[0].default_account if mine else "")


def association_for(limits: Limits, account: str | None, partition: str | None) -> Association | None:
    """The association a job of this account (default: the user's default) and partition runs under: the
    partition's own, else the account's for every partition (slurmctld looks them up in that order); None
    where the user has none (sbatch refuses where associations are enforced)."""
    rows = [a for a in associations_here(limits) if a.account == account_of(limits, account)]
    return next((a for a in rows if partition and a.partition == partition), None) or next(
        (a for a in rows if not a.partition), None
    )


def qos_of(association: Association, asked: str | None) -> str:
    """The QOS a job runs under: the one it asks for, else the association's default, else its only one, else
    "normal" (Slurm's rule)."""
    if asked:
        return asked
    if association.default_qos:
        return association.default_qos
    return association.qos[0] if len(association.qos) == 1 else "normal"


def queued_in_qos(limits: Limits, name: str) -> int:
    """The user's queued jobs that count toward the QOS's per-user limits: those that run under it."""
    return sum(q.qos == name for q in limits.queue)


def queued_under(limits: Limits, association: Association) -> int:
    """The user's queued jobs that count toward the association's limits: those it is the association of (a job
    in a partition with an association of its own counts there, not toward the account's for every partition)."""
    return sum(association_for(limits, q.account, q.partition) == association for q in limits.queue)


def limit_problems(plan: Plan, limits: Limits) -> list[str]:
    """Why the run's jobs (one per group in either layout) cannot all be submitted, or cannot all run at once,
    under the user's QOS and association limits; [] when they can."""
    per_qos: dict[str, list[str]] = {}
    per_association: dict[Association, list[str]] = {}
    for g in plan.groups:
        association = association_for(limits, g.account or plan.account, g.partition)
        if association is None:
            continue
        per_qos.setdefault(qos_of(association, g.qos or plan.qos), []).append(g.name)
        per_association.setdefault(association, []).append(g.name)
    problems = []
    for name, groups in per_qos.items():
        qos = limits.qos.get(name)
        if qos is not None:
            problems += _over(
                plan,
                groups,
                queued_in_qos(limits, name),
                qos.max_submit_pu,
                qos.max_jobs_pu,
                f"QOS '{name}'",
                ("MaxSubmitJobsPerUser", "MaxJobsPerUser"),
            )
    for association, groups in per_association.items():
        where = f"account '{association.account}'" + (
            f" in partition '{association.partition}'" if association.partition else ""
        )
        problems += _over(
            plan,
            groups,
            queued_under(limits, association),
            association.max_submit,
            association.max_jobs,
            f"your association with {where}",
            ("MaxSubmitJobs", "MaxJobs"),
        )
    return problems


def _over(
    plan: Plan,
    groups: list[str],
    queued: int,
    max_submit: int | None,
    max_jobs: int | None,
    whose: str,
    names: tuple[str, str],
) -> list[str]:
    needed = len(groups)
    how = (
        "one job per group, slurm.layout: jobs"
        if plan.layout == "jobs"
        else "each component of the het job counts as a job"
    )
    counted = f"{needed} job{'s' if needed > 1 else ''} ({how}: {', '.join(groups)})"
    fix = (
        "run fewer groups (an eval or buffer group is a job of its own; workers.placement seed or impala has no "
        "policy group), ask for another QOS (slurm.qos, or slurm.<group>.qos for some groups), or ask your "
        "administrators for a higher limit (slurm.layout does not change the count)"
    )
    if max_jobs is not None and needed > max_jobs:
        return [
            f"{whose} runs at most {max_jobs} of your jobs at once ({names[1]}), and this run needs {counted} "
            f"running together: its workers would wait for each other for ever. To fix: {fix}"
        ]
    if max_submit is not None and queued + needed > max_submit:
        have = f"you have {queued} there already" if queued else "you have none there"
        return [
            f"{whose} takes at most {max_submit} of your jobs in the queue ({names[0]}); {have}, and this run "
            f"needs {counted}. To fix: wait for (or cancel) jobs of yours, or {fix}"
        ]
    return []


def read_limits(settings: dict[str, str], ask: Callable[[list[str]], str | None]) -> Limits | None:
    """The user's limits and queue where limits are enforced (ask_limits); None elsewhere, or where sacctmgr or
    squeue gave no answer: there is then nothing to check."""
    return ask_limits(settings, ask) if limits_enforced(settings) else None


def ask_limits(settings: dict[str, str], ask: Callable[[list[str]], str | None]) -> Limits | None:
    """The user's limits and queue from sacctmgr and squeue, enforced or not, through `ask(command) -> stdout or
    None` (None: it is missing, failed or did not answer); None where one of them gave no answer."""
    user = pwd.getpwuid(os.getuid()).pw_name  # who Slurm sees ($USER may be unset or another's)
    associations = ask(["sacctmgr", "-nP", "show", "user", user, "withassoc", f"format={ASSOC_FORMAT}"])
    qos = ask(["sacctmgr", "-nP", "show", "qos", f"format={QOS_FORMAT}"])
    queue = ask(["squeue", "-u", user, "-h", "-r", "-o", QUEUE_FORMAT])
    if associations is None or qos is None or queue is None:
        return None
    return Limits(
        user,
        settings.get("ClusterName", ""),
        tuple(parse_associations(associations)),
        parse_qos(qos),
        tuple(parse_queue(queue)),
    )
