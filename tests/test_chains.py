"""Continuation jobs (`resume --after/--chain`), without a cluster: the sbatch dependencies, the run's jobs
in slurm.json, and the rendered job script's continuation lines run by bash with a fake srun. The real
chain is test_slurm_waiting's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, slurm_run
from launcher import cli, plan, runs, slurm, status
from srl_hpc import config
from srl_hpc.rundir import RunDir

SINFO = "\n".join(f"n{k}|{p}|16|16000|(null)" for k in range(1, 5) for p in ("cpu*", "gpu"))


# -------------------------------------------------------------------------------- continuation jobs


@pytest.fixture
def cluster(monkeypatch):
    monkeypatch.setattr(slurm, "cluster_facts", lambda: plan.parse_sinfo(SINFO))
    monkeypatch.setattr(slurm, "mpi_plugins", lambda: ["none", "pmix"])  # (srun --mpi=list: no srun needed)


def test_resume_chain_queues_continuations_each_after_the_one_before(tmp_path, fake_bin, cluster, capsys):
    run = slurm_run(tmp_path, status_=None)
    args = tmp_path / "sbatch.args"
    fake_bin("sbatch", f'echo "$@" >> {args}; n=$(wc -l < {args}); echo $((200 + n))')
    fake_bin("squeue", 'echo "100|RUNNING|None|2026-12-03T09:00:00"')  # the run's own job is still running
    assert cli.main(["resume", str(run.root), "--chain", "3"]) == 0
    assert "queued job 201, 202, 203, after job 100" in capsys.readouterr().out
    calls = args.read_text().splitlines()
    assert calls == [f"--parsable --dependency=afterany:{after} {run.job_script}" for after in (100, 201, 202)]
    assert slurm.jobs_of(run) == ["100", "201", "202", "203"]
    assert run.attempt == 1  # moved on by each job as it starts, not while job 100 still writes here
    assert "--next-attempt" in run.job_script.read_text()
    assert cli.main(["resume", str(run.root), "--after", "555"]) == 0  # an explicit job to wait for
    assert args.read_text().splitlines()[-1] == f"--parsable --dependency=afterany:555 {run.job_script}"
    assert slurm.jobs_of(run)[-1] == "204"
    assert cli.main(["resume", str(run.root)]) == 2  # a plain resume while the run's job runs: refused
    assert "--after 100" in capsys.readouterr().err
    assert cli.main(["resume", str(run.root), "--chain", "0"]) == 2


def test_a_chain_after_a_stopped_run_starts_at_once_and_cancel_stops_every_live_job(tmp_path, fake_bin, cluster):
    run = slurm_run(tmp_path, status_="cancelled")
    run.checkpoint.parent.mkdir()
    run.checkpoint.write_bytes(b"checkpoint")
    args = tmp_path / "sbatch.args"
    fake_bin("sbatch", f'echo "$@" >> {args}; n=$(wc -l < {args}); echo $((200 + n))')
    fake_bin("squeue", 'echo "100|CANCELLED|None|N/A"; echo "201|RUNNING|None|N/A"; echo "202|PENDING|Dependency|N/A"')
    assert runs.continue_later(run.root, sys.executable, "test", count=2) == (None, ["201", "202"])
    assert args.read_text().splitlines()[0] == f"--parsable {run.job_script}"  # nothing to wait for
    cancelled = tmp_path / "scancel.args"
    fake_bin("scancel", f'echo "$@" > {cancelled}')
    assert cli.main(["cancel", str(run.root)]) == 0
    assert cancelled.read_text().split() == ["201", "202"]
    state, report = status.describe(run)
    assert state == "running" and "slurm job 201: RUNNING" in report
    assert "queued after it (resume --after/--chain): 202 PENDING (Dependency), expected start unknown" in report


def continuation_script(tmp_path, monkeypatch, overrides=()) -> Path:
    monkeypatch.setattr(slurm, "cluster_facts", lambda: (_ for _ in ()).throw(slurm.SlurmError("no cluster")))
    exp = config.with_overrides(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"), list(overrides))
    request = slurm.prepare(exp, tmp_path / "run", sys.executable, "test", require_cluster=False, continuation=True)
    script = tmp_path / "job.sbatch"
    script.write_text(request.script)
    return script


@pytest.mark.parametrize(
    "summary, restarts, code, attempt",
    [
        ("succeeded", 0, 0, None),  # the run already ended by itself: no training again
        ("failed", 0, 1, None),
        ("cancelled", 0, 0, 2),  # stopped at its time limit: the next attempt, from the checkpoint
        (None, 0, 0, 2),  # killed before it could write a summary
        ("cancelled", 1, 0, 2),  # a continuation Slurm requeued: the script's own requeue lines move on, once
    ],
)
def test_a_continuation_job_is_the_next_attempt_of_its_run_unless_the_run_has_ended(
    tmp_path, monkeypatch, fake_bin, summary, restarts, code, attempt
):
    script = continuation_script(tmp_path, monkeypatch)
    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    if summary:
        run.summary.write_text(json.dumps({"status": summary}))
    seen = tmp_path / "srun.saw"
    fake_bin("srun", f"cat {run.attempt_file} > {seen}")  # what the workers would find
    env = {**os.environ, "SLURM_RESTART_COUNT": str(restarts)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if attempt is None:
        assert not seen.exists() and run.attempt == 1 and run.summary.exists()
        assert f"the run has already {summary}" in proc.stdout or "not continued" in proc.stdout
    else:
        assert seen.read_text().strip() == str(attempt) and run.attempt == attempt
        assert run.attempt_summary(1).exists() == (summary is not None)


def test_the_continuation_lines_run_after_the_setup_lines_and_before_the_workers(tmp_path, monkeypatch):
    text = continuation_script(tmp_path, monkeypatch, ["slurm.setup=[echo setup-line]"]).read_text()
    assert text.index("\necho setup-line\n") < text.index('--outcome)" in') < text.index("\nsrun ")
    plain = slurm.prepare(
        config.load(ROOT / "experiments" / "cartpole_ppo.yaml"),
        tmp_path / "run",
        sys.executable,
        "test",
        require_cluster=False,
    ).script
    assert "a continuation" not in plain  # the job of a plain submit or resume is unchanged
