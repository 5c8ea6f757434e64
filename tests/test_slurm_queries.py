"""How the launcher reads Slurm's answers and how often it asks (pure parts; the real squeue is in test_slurm)."""

from launcher import slurm, slurm_jobs


def test_het_components_count_for_their_job_and_array_tasks_for_themselves():
    squeue = "123+0|RUNNING\n123+1|RUNNING\n123+2|FAILED\n200_0|COMPLETED\n200_1|PENDING\n999|RUNNING\n"
    raw = slurm_jobs.parse_states(squeue, ["123", "200_0", "200_1", "300"])
    assert raw == {"123": ["RUNNING", "RUNNING", "FAILED"], "200_0": ["COMPLETED"], "200_1": ["PENDING"]}
    assert slurm_jobs.combine(raw["123"]) == ("failed", "FAILED")  # one failed component fails the het job
    assert slurm_jobs.combine(raw.get("300", [])) == ("unknown", "UNKNOWN")


def test_sacct_states_with_who_cancelled_and_requeue_marks():
    raw = slurm_jobs.parse_states("55|CANCELLED by 0\n56|COMPLETED\n57|RUNNING+\n", ["55", "56", "57"])
    assert [slurm_jobs.combine(raw[i])[0] for i in ("55", "56", "57")] == ["cancelled", "completed", "running"]


def test_a_watched_job_is_asked_about_less_and_less_often_until_it_is_about_to_end(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(slurm.time, "monotonic", lambda: now[0])
    ask = slurm_jobs.Polite(first=1.0, most=15.0)
    asked = []
    while now[0] < 120:  # a follower that wakes every half second for two minutes
        if ask.due():
            asked.append(now[0])
        now[0] += 0.5
    assert asked[:6] == [0.0, 1.0, 3.0, 7.0, 15.0, 30.0]
    assert all(b - a == 15.0 for a, b in zip(asked[5:], asked[6:]))
    assert len(asked) == 11  # not the 240 of asking at every wake-up
    asked.clear()
    for _ in range(10):  # the run wrote its summary: every second again
        if ask.due(hurry=True):
            asked.append(now[0])
        now[0] += 0.5
    assert asked == [120.0, 121.0, 122.0, 123.0, 124.0]


# ------------------------------------------------------------------ waiting on a busy cluster (issue 30)


def test_a_pending_job_reads_with_its_reason_and_expected_start():
    squeue = (
        "40+0|PENDING|Resources|2026-12-03T10:00:00\n40+1|PENDING|None|2026-12-03T10:00:00\n"
        "41|PENDING|JobHeldUser|N/A\n42|RUNNING|None|2026-12-03T09:00:00\n"
    )
    rows = slurm_jobs.parse_rows(squeue, ["40", "41", "42"])
    het, held, running = (slurm_jobs.combine_info(rows[i]) for i in ("40", "41", "42"))
    assert het == ("pending", "PENDING", "Resources", "2026-12-03T10:00:00", "")
    assert het.line() == "PENDING (Resources), expected start 2026-12-03T10:00:00"
    assert held.line() == "PENDING (JobHeldUser), expected start unknown"  # Slurm says N/A
    assert running.line() == "RUNNING" and running[:2] == ("running", "RUNNING")  # (state, raw) as before
    assert slurm_jobs.pending_text("Priority", "Unknown") == "(Priority), expected start unknown"
    assert (
        slurm_jobs.pending_text("None", "2026-12-04T00:00:00")
        == "(no reason given), expected start 2026-12-04T00:00:00"
    )
    lost = slurm_jobs.combine_info([], "squeue: slurm_load_jobs error: Unable to contact slurm controller")
    assert lost.state == "unknown" and "Unable to contact" in lost.line()


def asks_over(ask, seconds, now, hurry=lambda t: False, answer=lambda t: "running", step=0.5):
    """The times a follower that wakes every `step` s asks Slurm, hearing answer(t)."""
    asked, end = [], now[0] + seconds
    while now[0] < end:
        if ask.due(hurry=hurry(now[0])):
            asked.append(now[0])
            ask.heard(answer(now[0]))
        now[0] += step
    return asked


def test_a_pending_job_is_asked_about_at_most_once_a_minute_then_politely_once_it_runs(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(slurm.time, "monotonic", lambda: now[0])
    ask = slurm_jobs.Polite()
    asked = asks_over(ask, 300, now, answer=lambda t: "pending" if t < 200 else "running")
    pending = [t for t in asked if t <= 200]
    assert pending == [0.0, 60.0, 120.0, 180.0, 240.0][: len(pending)] and len(pending) == 4
    assert asked[4:9] == [240.0, 241.0, 243.0, 247.0, 255.0]  # running: 1, 2, 4, 8, then every 15 s
    assert all(b - a == 15.0 for a, b in zip(asked[8:], asked[9:]))


def test_the_one_second_looks_at_a_run_that_says_it_is_ending_are_bounded(monkeypatch):
    """The summary is written, but the job stays on (pending after a requeue, or hung): ten quick looks,
    then back to the backoff, and to once a minute while it is pending; a new summary, ten more."""
    now = [0.0]
    monkeypatch.setattr(slurm.time, "monotonic", lambda: now[0])
    ask = slurm_jobs.Polite()
    asks_over(ask, 100, now)  # running for a while: asked every 15 s by now
    asked = asks_over(ask, 120, now, hurry=lambda t: True)
    assert asked[:10] == [101.0 + k for k in range(10)]  # the first a second after the summary appeared
    assert asked[10:15] == [112.0, 116.0, 124.0, 139.0, 154.0]  # the backoff again, not 120 looks
    asked = asks_over(ask, 300, now, hurry=lambda t: True, answer=lambda t: "pending")
    assert all(b - a >= 60.0 for a, b in zip(asked, asked[1:]))
    asks_over(ask, 60, now, hurry=lambda t: False, answer=lambda t: "running")  # the summary went (next attempt)
    asked = asks_over(ask, 10, now, hurry=lambda t: True)
    assert len(asked) >= 9 and all(b - a == 1.0 for a, b in zip(asked, asked[1:]))


class FakeSlurm:
    """job_states' answers, one list of JobInfos per look (the last repeats), and the looks taken."""

    def __init__(self, monkeypatch, *answers):
        self.answers, self.looks = list(answers), []
        self.now = [0.0]
        monkeypatch.setattr(slurm.time, "monotonic", lambda: self.now[0])
        monkeypatch.setattr(slurm_jobs, "job_states", self.job_states)

    def job_states(self, ids):
        self.looks.append(self.now[0])
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return dict(zip(ids, answer))

    def run(self, watch, seconds, step=1.0):
        """Call watch.check() every `step` s (as the follow loop does); the final state and when."""
        end = self.now[0] + seconds
        while self.now[0] < end:
            final = watch.check()
            if final is not None:
                return final, self.now[0]
            self.now[0] += step
        return None, self.now[0]


PENDING = slurm_jobs.JobInfo("pending", "PENDING", "Priority", "")
RUNNING = slurm_jobs.JobInfo("running", "RUNNING", "None", "2026-12-03T10:00:00")
UNKNOWN = slurm_jobs.JobInfo("unknown", "UNKNOWN")


def test_following_a_pending_job_says_its_reason_once_and_again_only_when_it_changes(monkeypatch):
    later = PENDING._replace(start="2026-12-03T10:00:00")
    fake = FakeSlurm(
        monkeypatch,
        [PENDING],
        [PENDING],
        [later],
        [later],
        [RUNNING],
        [RUNNING._replace(state="completed", raw="COMPLETED")],
    )
    said = []
    watch = slurm_jobs.Watch(lambda: ["7"], say=said.append)
    final, _ = fake.run(watch, 1000)
    assert final == "completed"
    assert said == [
        "job 7 pending (Priority), expected start unknown",
        "job 7 pending (Priority), expected start 2026-12-03T10:00:00",
        "job 7 running",
    ]
    assert fake.looks[:5] == [0.0, 60.0, 120.0, 180.0, 240.0]  # while pending: once a minute


def test_a_pending_job_whose_output_file_appears_is_asked_about_at_once_not_a_minute_later(monkeypatch):
    """The job script's output file appears as the job starts: a follower sees it within a second."""
    fake = FakeSlurm(monkeypatch, [PENDING], [RUNNING])
    watch = slurm_jobs.Watch(lambda: ["7"], started=lambda job: job == "7" and fake.now[0] >= 5.0)
    fake.run(watch, 30)
    assert fake.looks[:2] == [0.0, 5.0] and watch.state == "running"
    never = FakeSlurm(monkeypatch, [PENDING])
    never.run(slurm_jobs.Watch(lambda: ["7"], started=lambda job: False), 150)
    assert never.looks == [0.0, 60.0, 120.0]


def test_a_run_with_a_summary_whose_job_slurm_no_longer_knows_ends_with_the_run_outcome(monkeypatch):
    """No accounting, and the job aged out of slurmctld (MinJobAge): squeue and sacct know nothing."""
    fake = FakeSlurm(monkeypatch, [UNKNOWN])
    outcome = slurm_jobs.Watch(lambda: ["7"], ending=lambda: True, outcome=lambda: "completed")
    assert fake.run(outcome, 600) == ("completed", 0.0)
    fake.now[0] = 0.0
    without_outcome = slurm_jobs.Watch(lambda: ["7"], ending=lambda: True)
    assert fake.run(without_outcome, 600) == ("unknown", 0.0)


def test_a_job_slurm_no_longer_knows_and_no_summary_is_given_up_after_a_while_unless_slurm_did_not_answer(monkeypatch):
    fake = FakeSlurm(monkeypatch, [UNKNOWN])
    final, when = fake.run(slurm_jobs.Watch(lambda: ["7"], ending=lambda: False), 3 * slurm_jobs.LOST_AFTER)
    assert final == "unknown" and slurm_jobs.LOST_AFTER <= when <= slurm_jobs.LOST_AFTER + 15
    fake = FakeSlurm(monkeypatch, [UNKNOWN._replace(error="squeue: Unable to contact slurm controller")])
    said = []
    assert fake.run(slurm_jobs.Watch(lambda: ["7"], say=said.append), 3 * slurm_jobs.LOST_AFTER)[0] is None
    assert said == ["job 7: squeue: Unable to contact slurm controller (asking again)"]  # once


def test_a_chain_is_followed_through_its_continuations_to_the_last(monkeypatch):
    done = RUNNING._replace(state="completed", raw="COMPLETED")
    waiting = PENDING._replace(reason="Dependency")
    fake = FakeSlurm(
        monkeypatch, [RUNNING, waiting, waiting], [done, RUNNING, waiting], [done, done, RUNNING], [UNKNOWN, done, done]
    )
    said = []
    final, _ = fake.run(slurm_jobs.Watch(lambda: ["1", "2", "3"], say=said.append), 600)
    assert final == "completed" and said == ["job 1 running", "job 2 running", "job 3 running"]
    assert slurm_jobs.current(["1", "2"], {"1": done, "2": waiting}) == ("2", waiting)
    assert slurm_jobs.current(["1", "2"], {"1": done, "2": UNKNOWN}) == ("2", UNKNOWN)


def test_a_continuation_waits_for_the_job_before_it_however_that_one_ended():
    assert slurm.sbatch_command("/r/job.sbatch") == ["sbatch", "--parsable", "/r/job.sbatch"]
    assert slurm.sbatch_command("/r/job.sbatch", after="41") == [
        "sbatch",
        "--parsable",
        "--dependency=afterany:41",
        "/r/job.sbatch",
    ]


# ------------------------------------------------------------------ a job that ended badly (issue 51)

# `scontrol show job 812` of a het job whose nodes could not see its run directory (under the login node's /tmp)
LAUNCH_FAILED = """\
JobId=812 HetJobId=812 HetJobOffset=0 JobName=srl-cartpole_ppo
   HetJobIdSet=812-813
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   Priority=1 Nice=0 Account=rl QOS=normal
   JobState=FAILED Reason=JobLaunchFailure Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:1
   RunTime=00:00:00 TimeLimit=00:10:00 TimeMin=N/A
   SubmitTime=2026-05-02T10:00:00 EligibleTime=2026-05-02T10:00:00
   StartTime=2026-05-02T10:00:01 EndTime=2026-05-02T10:00:01 Deadline=N/A
   Partition=cpu AllocNode:Sid=login:4242
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=node1
   BatchHost=node1
   NumNodes=1 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,mem=1G,node=1,billing=2
   Command=/tmp/alice/run/job.sbatch
   WorkDir=/tmp/alice/run
   Comment=a run of the week
   StdErr=/tmp/alice/run/slurm-812.out
   StdIn=/dev/null
   StdOut=/tmp/alice/run/slurm-812.out
   Power=

JobId=813 HetJobId=812 HetJobOffset=1 JobName=srl-cartpole_ppo
   HetJobIdSet=812-813
   JobState=FAILED Reason=JobLaunchFailure Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:1
   NodeList=node2
   Command=/tmp/alice/run/job.sbatch
   Power=

"""


def test_a_failed_het_job_reads_with_slurms_reason_and_exit_code_for_each_component():
    ends = slurm_jobs.parse_show_job(LAUNCH_FAILED)
    assert ends == [("812+0", "FAILED", "JobLaunchFailure", "0:1"), ("812+1", "FAILED", "JobLaunchFailure", "0:1")]
    assert slurm_jobs.end_lines(ends) == [
        "Slurm: job 812+0, 812+1 FAILED, reason JobLaunchFailure, ExitCode 0:1 (exit status:signal)"
    ]


def test_scontrol_one_line_records_of_a_timeout_and_a_cancel_without_a_reason():
    one_line = (
        "JobId=90 JobName=srl-pong UserId=bob(1002) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) "
        "Requeue=0 Restarts=0 BatchFlag=1 ExitCode=0:15 WorkDir=/home/bob/my runs/pong Power=\n"
        "JobId=91 JobName=srl-pong JobState=CANCELLED Reason=None ExitCode=0:0 Power=\n"
    )
    ends = slurm_jobs.parse_show_job(one_line)
    assert ends == [("90", "TIMEOUT", "TimeLimit", "0:15"), ("91", "CANCELLED", "None", "0:0")]
    assert (
        slurm_jobs.end_lines(ends)[1] == "Slurm: job 91 CANCELLED, no reason given, ExitCode 0:0 (exit status:signal)"
    )
    assert slurm_jobs.parse_show_job("slurm_load_jobs error: Invalid job id specified\n") == []


def test_where_to_look_says_when_the_batch_script_never_ran_and_names_the_logs(tmp_path):
    from launcher import status
    from srl_hpc.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    assert status.where_to_look(run, "812") == [
        f"{run.root}/slurm-812.out does not exist: the batch script never ran on a node (can every node see "
        f"{run.root}?)"
    ]
    run.slurm_output("812").write_text("srun: error: ...\n")
    run.log("controller/0").write_text("started\n")
    assert status.where_to_look(run, "812") == [
        f"the batch script's output: {run.root}/slurm-812.out",
        f"the workers' logs: {run.logs}/ (1 file; srl-launch logs {run.root} --worker NAME)",
    ]
