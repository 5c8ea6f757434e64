"""A run's Slurm jobs once submitted: what Slurm says of them, why they ended, a polite watch until they
end, and cancelling them.

Job state comes from squeue, which works on every cluster, and from sacct where accounting exists, all read
through one table of Slurm states; one question covers every job of a sweep or of a chain, and a watched job
is asked about with backoff (`Polite`), as cluster admins expect of tools that poll: at most once a minute
while it is pending. With `slurm.layout: jobs` the run's jobs are followed, cancelled and reported together.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from typing import NamedTuple

from launcher import slurm
from srl_hpc.rundir import RunDir

PENDING_POLL = 60.0  # a pending job is asked about at most this often
FAST_POLLS = 10  # once the run says it is ending: this many looks a second apart, then backoff again
LOST_AFTER = 600.0  # a job neither squeue nor sacct has known for this long (and no summary): stop watching

# Slurm job state -> what it means for a run. Finished states are the ones that never change again.
STATES = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "SPECIAL_EXIT": "failed",
    "RUNNING": "running",
    "COMPLETING": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
    "SUSPENDED": "suspended",
    "STOPPED": "suspended",
    "RESIZING": "running",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "DEADLINE": "failed",
    "TIMEOUT": "timeout",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "REVOKED": "cancelled",
}


FINISHED = {"completed", "failed", "timeout", "cancelled"}
PRECEDENCE = ["failed", "timeout", "cancelled", "running", "suspended", "pending", "completed", "unknown"]


# a run's summary.json status -> the run state it stands for (when Slurm no longer knows the job)
OUTCOMES: dict[str | None, str] = {"succeeded": "completed", "failed": "failed", "cancelled": "cancelled"}
NO_TIME = {"", "N/A", "Unknown", "None", "(null)"}  # squeue %S when Slurm has no start time


class JobInfo(NamedTuple):
    """Slurm's word on one job. Indexes 0 and 1 are the (state, raw state) pair callers have always had."""

    state: str  # what it means for the run (STATES), "unknown" when neither squeue nor sacct knows the job
    raw: str  # Slurm's own state
    reason: str = ""  # squeue %r: why a pending job waits (Priority, Resources, Dependency, JobHeldUser, ...)
    start: str = ""  # squeue %S: a pending job's expected start ("" when Slurm does not know)
    error: str = ""  # what went wrong asking, when squeue failed

    def line(self) -> str:
        """'PENDING (Priority), expected start 2026-12-03T10:00:00', 'RUNNING', 'UNKNOWN (squeue: ...)'"""
        if self.state == "pending":
            return f"{self.raw} {pending_text(self.reason, self.start)}"
        return f"{self.raw} ({self.error})" if self.error and self.state == "unknown" else self.raw


def pending_text(reason: str, start: str) -> str:
    """'(Priority), expected start 2026-12-03T10:00:00', or '... expected start unknown' when Slurm says N/A."""
    return (
        f"({reason})" if reason and reason != "None" else "(no reason given)"
    ) + f", expected start {start if start not in NO_TIME else 'unknown'}"


def job_states(job_ids: list[str]) -> dict[str, JobInfo]:
    """Slurm's word on each job, from one question to Slurm for all of them: one squeue (slurmctld keeps a
    job MinJobAge after it ends), then one sacct for the jobs squeue no longer knows (where accounting
    exists). A job neither knows is ("unknown", "UNKNOWN")."""
    ids = list(dict.fromkeys(job_ids))
    proc = slurm._run(
        ["squeue", "-h", "--states=all", "--array", "-j", ",".join(ids), "-o", "%i|%T|%r|%S"], check=False
    )
    rows = parse_rows(proc.stdout, ids) if proc.returncode == 0 else {}
    # squeue exits 1 when it knows none of them ("Invalid job id"); anything else is worth saying
    error = (
        ""
        if proc.returncode == 0 or "Invalid job id" in proc.stderr
        else f"squeue: {proc.stderr.strip() or f'exit {proc.returncode}'}"
    )
    missing = [i for i in ids if i not in rows]
    if missing and shutil.which("sacct") is not None:
        proc = slurm._run(["sacct", "-n", "-X", "-P", "-j", ",".join(missing), "-o", "JobID,State"], check=False)
        if proc.returncode == 0:  # exits 1 where accounting is disabled
            rows.update(parse_rows(proc.stdout, missing))
    return {i: combine_info(rows.get(i, []), error) for i in ids}


def job_state(job_id: str) -> JobInfo:
    return job_states([job_id])[job_id]


def parse_rows(text: str, ids: list[str]) -> dict[str, list[list[str]]]:
    """`ID|STATE[|REASON|START]` lines (squeue -o %i|%T|%r|%S, sacct -o JobID,State -P) -> the fields after
    the id of each asked id; a het job's components (123+0, 123+1) count for 123, an array task (123_4)
    for itself."""
    out: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        slurm_id, *fields = line.strip().split("|")
        for owner in (slurm_id, slurm_id.split("+", 1)[0]):
            if owner in ids and fields and fields[0]:
                out.setdefault(owner, []).append(fields)
                break
    return out


def parse_states(text: str, ids: list[str]) -> dict[str, list[str]]:
    """The raw states of each asked id (parse_rows' first field)."""
    return {i: [row[0] for row in rows] for i, rows in parse_rows(text, ids).items()}


def combine(raw: list[str]) -> tuple[str, str]:
    """A het job's components may differ: the state that matters most ("CANCELLED by 0" is CANCELLED)."""
    if not raw:
        return "unknown", "UNKNOWN"
    states = [(STATES.get(s.split()[0].rstrip("+"), "unknown"), s) for s in raw]
    return min(states, key=lambda st: PRECEDENCE.index(st[0]))


def combine_info(rows: list[list[str]], error: str = "") -> JobInfo:
    """One JobInfo from a job's rows (one per het component): the state that matters most, the first
    reason Slurm gives, the latest expected start (the components start together)."""
    state, raw = combine([row[0] for row in rows])
    reasons = [row[1] for row in rows if len(row) > 1 and row[1] not in ("", "None")]
    starts = [row[2] for row in rows if len(row) > 2 and row[2] not in NO_TIME]
    return JobInfo(
        state, raw, reasons[0] if reasons else "", max(starts) if starts else "", error if state == "unknown" else ""
    )


class JobEnd(NamedTuple):
    """How a job (or one het component) ended, in `scontrol show job`'s words."""

    job: str  # 123, or 123+1 for a het job's component
    state: str  # JobState: FAILED, NODE_FAIL, TIMEOUT, ...
    reason: str  # Reason: JobLaunchFailure, NonZeroExitCode, TimeLimit, ... ("None" when Slurm gives none)
    exit_code: str  # ExitCode: the batch script's exit status:the signal that ended it


def parse_show_job(text: str) -> list[JobEnd]:
    """`scontrol show job` text (its indented lines, or -o's one line per job) -> one JobEnd per record (a
    het job shows one per component). A word without KEY= continues the value before it."""
    records: list[dict[str, str]] = []
    key = ""
    for word in text.split():
        name, sep, value = word.partition("=")
        if sep and name[:1].isalpha() and (records or name == "JobId"):
            if name == "JobId":
                records.append({})
            key = name
            records[-1][key] = value
        elif records:
            records[-1][key] += " " + word
    return [
        JobEnd(
            f"{r['HetJobId']}+{r['HetJobOffset']}" if "HetJobOffset" in r else r["JobId"],
            r.get("JobState", "UNKNOWN"),
            r.get("Reason", "None"),
            r.get("ExitCode", "?"),
        )
        for r in records
    ]


def end_lines(ends: list[JobEnd]) -> list[str]:
    """One line per way the job's components ended ('Slurm: job 7+0, 7+1 FAILED, reason JobLaunchFailure,
    ExitCode 1:0 (exit status:signal)')."""
    jobs_by_end: dict[tuple[str, str, str], list[str]] = {}
    for end in ends:
        jobs_by_end.setdefault((end.state, end.reason, end.exit_code), []).append(end.job)
    return [
        f"Slurm: job {', '.join(jobs)} {state}, "
        + (f"reason {reason}" if reason != "None" else "no reason given")
        + f", ExitCode {code} (exit status:signal)"
        for (state, reason, code), jobs in jobs_by_end.items()
    ]


def job_end(job_id: str) -> list[str]:
    """Slurm's reason and exit code for an ended job (end_lines), or why Slurm cannot give them: it keeps a
    job MinJobAge after its end."""
    try:
        proc = slurm._run(["scontrol", "show", "job", job_id], check=False)
    except slurm.SlurmError as e:
        return [f"no word from Slurm on how job {job_id} ended: {e}"]
    ends = parse_show_job(proc.stdout) if proc.returncode == 0 else []
    if not ends:
        said = proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
        return [f"no word from Slurm on how job {job_id} ended (scontrol show job {job_id}: {said})"]
    return end_lines(ends)


def live(info: JobInfo) -> bool:
    """Slurm still has the job to run or running (not ended, and known)."""
    return info.state not in FINISHED and info.state != "unknown"


def current(job_ids: list[str], infos: dict[str, JobInfo], together: bool = False) -> tuple[str, JobInfo]:
    """Which of a run's jobs (slurm.jobs_of) speaks for it: the first still live (the ones after it wait for
    it), else the last. together (the jobs layout's groups, which run side by side): while any is live, the
    first pending (the run waits for it), else the first live; then the one whose end matters most (failed,
    timed out, cancelled, before completed: combine's order)."""
    if together:
        alive = [i for i in job_ids if live(infos[i])]
        if alive:
            speaker = next((i for i in alive if infos[i].state == "pending"), alive[0])
        else:
            speaker = min(job_ids, key=lambda i: PRECEDENCE.index(infos[i].state))
        return speaker, infos[speaker]
    for job_id in job_ids:
        if live(infos[job_id]):
            return job_id, infos[job_id]
    return job_ids[-1], infos[job_ids[-1]]


def run_job(run: RunDir) -> tuple[str, JobInfo]:
    """The run's current job and Slurm's word on it (one squeue for all of the run's jobs)."""
    ids = slurm.jobs_of(run)
    return current(ids, job_states(ids), together=bool(slurm.group_jobs(run)))


def groups_line(groups: dict[str, str], infos: dict[str, JobInfo]) -> str:
    """The jobs layout's groups in a line: 'waiting for group actor (job 12): pending, reason Priority, expected
    start unknown', or each group's state while none waits ('group trainer (job 10) running, ...')."""
    for group, job in groups.items():
        info = infos[job]
        if info.state == "pending":
            start = info.start if info.start not in NO_TIME else "unknown"
            reason = info.reason if info.reason and info.reason != "None" else "none given"
            return f"waiting for group {group} (job {job}): pending, reason {reason}, expected start {start}"
    return ", ".join(f"group {group} (job {job}) {infos[job].state}" for group, job in groups.items())


def outcome_of(run: RunDir) -> str | None:
    """The run state its summary.json stands for (completed, failed, cancelled), None without one."""
    try:
        return OUTCOMES.get(json.loads(run.summary.read_text()).get("status"))
    except (OSError, ValueError, AttributeError):
        return None


class Polite:
    """When to ask Slurm next about a job being watched: at once, then after 1, 2, 4, 8 s and every
    `most` (15) s after that, so that a run followed for hours costs its scheduler one squeue a quarter
    minute; a job heard to be pending (heard()) no sooner than `pending` (60) s after that look.
    `due(hurry=True)` (the run has written its summary: the job is about to end) gives `fast` (10) looks
    a second apart, even while pending, then the backoff again: a job that stays on (a requeue, a hang)
    is not asked about every second for long. The next hurry needs the summary to have gone first."""

    def __init__(
        self, first: float = 1.0, most: float = 15.0, pending: float | None = None, fast: int | None = None
    ) -> None:
        self.first, self.most = first, most
        self.pending = PENDING_POLL if pending is None else pending
        self.fast = FAST_POLLS if fast is None else fast
        self.gap, self.next = first, time.monotonic()
        self.asked = self.next
        self.fast_left: int | None = None  # None: not hurried since the summary last appeared

    def due(self, hurry: bool = False) -> bool:
        now = time.monotonic()
        if not hurry:
            self.fast_left = None
        elif self.fast_left is None:
            self.fast_left, self.gap = self.fast, self.first
            self.next = min(self.next, now + self.first)
        if now < self.next:
            return False
        self.asked = now
        if self.fast_left:
            self.fast_left -= 1
            if self.fast_left:  # more quick looks to come
                self.next = now + self.first
                return True
            self.gap = 2 * self.first  # the last quick one: the backoff resumes
        self.next = now + self.gap
        self.gap = min(2 * self.gap, self.most)
        return True

    def wake(self) -> None:
        """Something outside Slurm says the job has moved on (its output file appeared): ask at once."""
        self.next = min(self.next, time.monotonic())

    def heard(self, state: str) -> None:
        """The answer to the last look: a pending job waits a minute for the next (unless hurried)."""
        if state == "pending" and not self.fast_left:
            self.next = max(self.next, self.asked + self.pending)
            self.gap = self.first  # once it runs: 1, 2, 4, ... again


class Watch:
    """A run's jobs followed until they end. check() asks Slurm only when Polite says so and returns the
    final state once no job of the run is live: the last one's finished state, or when Slurm no longer
    knows it (it ended MinJobAge ago on a cluster without accounting; or squeue failed) the run's outcome
    from its summary (`outcome()`); without a summary, "unknown" once Slurm has not known it for
    LOST_AFTER seconds. say(line): told when the current job's state, pending reason or expected start
    changes (and when asking fails), one line each time. groups() (the jobs layout: group -> job, {} for a
    het job): the jobs run side by side, the run ends when none is live, and the lines name the groups."""

    def __init__(
        self,
        jobs: Callable[[], list[str]],
        ending: Callable[[], bool] | None = None,
        outcome: Callable[[], str | None] | None = None,
        say: Callable[[str], None] | None = None,
        ask: Polite | None = None,
        started: Callable[[str], bool] | None = None,
        groups: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.jobs, self.ending, self.outcome, self.say, self.started = jobs, ending, outcome, say, started
        self.groups = groups or dict
        self.ask = ask or Polite()
        self.told: str | None
        self.unknown_since: float | None
        self.job_id: str | None
        self.state, self.told, self.unknown_since, self.job_id = "unknown", None, None, None

    def check(self) -> str | None:
        ending = bool(self.ending and self.ending())
        if self.state == "pending" and self.started and self.job_id is not None and self.started(self.job_id):
            self.ask.wake()  # the job started within the minute a pending job waits: no need to wait on
        if not self.ask.due(hurry=ending):
            return None
        ids, groups = self.jobs(), self.groups()
        infos = job_states(ids)
        job_id, info = current(ids, infos, together=bool(groups))
        self.job_id = job_id
        self.ask.heard(info.state)
        self.state = info.state
        if groups and not info.error:
            self._say(groups_line(groups, infos) if live(info) else None)
        else:
            self._tell(job_id, info)
        if live(info):
            self.unknown_since = None
            return None
        if info.state in FINISHED:
            return info.state
        if ending:  # the run has concluded; Slurm no longer knows its job
            return (self.outcome and self.outcome()) or "unknown"
        if info.error:  # Slurm did not answer: ask again
            return None
        now = time.monotonic()
        self.unknown_since = self.unknown_since or now
        return "unknown" if now - self.unknown_since >= LOST_AFTER else None

    def _tell(self, job_id: str, info: JobInfo) -> None:
        if info.state == "pending":
            line = f"job {job_id} pending {pending_text(info.reason, info.start)}"
        elif live(info):
            line = f"job {job_id} {info.state}"
        elif info.error:
            line = f"job {job_id}: {info.error} (asking again)"
        else:
            return  # an end: the caller reports it
        self._say(line)

    def _say(self, line: str | None) -> None:
        if self.say and line and line != self.told:
            self.say(line)
        self.told = line or self.told


def cancel(*job_ids: str) -> None:
    slurm._run(["scancel", *job_ids])


def cancel_run(run: RunDir) -> list[str]:
    """scancel a run's live jobs (its continuations too); returns their ids."""
    ids = slurm.jobs_of(run)
    infos = job_states(ids)
    targets = [i for i in ids if live(infos[i])] or [current(ids, infos)[0]]
    cancel(*targets)
    return targets


def wait(
    job_id: str, timeout: float | None = None, on_poll=None, ending=None, run: RunDir | None = None, say=None
) -> str:
    """Until the job has ended (its finished state returned; see Watch), asking Slurm as Polite says
    (ending(): the run says it is about to end). With run: every job of the run (continuations too),
    ending when its summary exists, and the summary's outcome when Slurm no longer knows the job.
    on_poll() runs every second (e.g. to stream a log); say(line): pending reasons and state changes."""
    if run is not None:
        watch = Watch(
            lambda: slurm.jobs_of(run),
            ending or run.summary.exists,
            lambda: outcome_of(run),
            say,
            started=lambda job: run.slurm_output(job).exists(),
            groups=lambda: slurm.group_jobs(run),
        )
    else:
        watch = Watch(lambda: [job_id], ending, None, say)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if on_poll:
            on_poll()
        final = watch.check()
        if final is not None:
            return final
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {watch.state} after {timeout:.0f}s")
        time.sleep(1.0)
