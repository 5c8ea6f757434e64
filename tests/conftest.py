import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from launcher import runs
from srl_hpc import config
from srl_hpc.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
# Run directories must be on a filesystem every node sees: the local Slurm's nodes each have a /tmp of
# their own, as a real cluster's do (scripts/local_slurm.sh), so tmp_path is under /var/tmp instead.
tempfile.tempdir = os.environ.get("SRL_TEST_TMPDIR", "/var/tmp")
# The project's local Slurm as a cluster profile: its partitions, network and workers per node, which the shipped
# experiments leave to the cluster's profile (tests/test_experiment_files.py checks that they do).
LOCAL_PROFILE = ROOT / "clusters" / "local.yaml"


@pytest.fixture
def python():
    """The interpreter the tests run under; its bin/ holds srl-launch and srl-trace."""
    return sys.executable


def script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def wait_until(condition, timeout: float, what: str, diagnose=None, interval: float = 0.05):
    """Call `condition` until it returns something true, and return that; past `timeout` seconds (set well below
    pytest's own limit, so that this message is the one a hang leaves) fail, naming `what` was waited for and,
    when given, what `diagnose()` says of the state it was in. `interval`: the pause between two calls (0 for a
    condition that does the work it waits for, such as serving a socket)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f"\n{diagnose()}" if diagnose is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        if interval:
            time.sleep(interval)


class Output:
    """The output of a process started with stdout=PIPE (stderr=STDOUT, text=True), read by a thread line by
    line, so that waiting for a line, or for the process's end, is bounded; every line read is in `seen`."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.seen, self._lines = proc, [], queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # the end of the output

    @property
    def text(self) -> str:
        return "\n".join(self.seen)

    def next_matching(self, test, timeout: float, what: str = "") -> str:
        """The next line for which `test(line)` is true, read within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line {what} within {timeout:g}s; the output so far:\n{self.text[-6000:]}"
                ) from None
            if line is None:
                self._lines.put(None)  # ended for every later call too
                raise AssertionError(
                    f"the output ended (exit {self.proc.poll()}) before a line {what}:\n{self.text[-6000:]}"
                )
            self.seen.append(line)
            if test(line):
                return line

    def line_with(self, text: str, timeout: float) -> str:
        """The next line that contains `text`."""
        return self.next_matching(lambda line: text in line, timeout, f"with {text!r}")

    def finish(self, timeout: float) -> str:
        """Wait for the process's end (at most `timeout` seconds), then return all its output."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the process ran past {timeout:g}s; its output so far:\n{self.text[-6000:]}"
            ) from None
        self._reader.join(timeout=30)
        while not self._lines.empty():
            line = self._lines.get()
            if line is not None:
                self.seen.append(line)
        return self.text


def run_local(experiment, run_dir: Path, *overrides: str, timeout: float = 180, returncode: int = 0, env=None):
    """`srl-launch EXPERIMENT --run-dir RUN_DIR --set OVERRIDE ...` to its end (srl()); asserts its exit code.
    Returns (process, summary)."""
    sets = [arg for override in overrides for arg in ("--set", override)]
    proc = srl(experiment, "--run-dir", run_dir, *sets, timeout=timeout, env=env)
    assert proc.returncode == returncode, proc.stdout[-6000:] + proc.stderr[-6000:]
    return proc, json.loads((run_dir / "summary.json").read_text())


def assert_every_frame_accounted_for(summary: dict) -> None:
    """Frames flowed, every frame an actor sent was received, and every one received was consumed or
    dropped (and counted as such)."""
    assert summary["frames_sent"] > 0, summary
    assert summary["frames_sent"] == summary["frames_received"], summary
    assert summary["frames_received"] == summary["frames_consumed"] + summary["frames_dropped"], summary


def assert_the_traces_account_for_every_frame(run_dir: Path, summary: dict) -> dict:
    """The traces, a record written apart from the counters the workers report (summary.json), give the same
    frames received, trained and dropped, and meet among themselves (srl_hpc.trace.accounting). Its figures."""
    from srl_hpc.trace import accounting, reader

    run = reader.read_run(run_dir)
    assert run.meta.get("summary") == summary
    frames = accounting.frame_accounting(run)
    assert frames is not None and frames["mismatches"] == [], frames
    held = {"frames_received", "frames_consumed", "frames_dropped"}
    held |= {"frames_sent"} if not frames["incomplete"] else set()
    assert held <= set(frames["checked_against_summary"]), frames
    return frames


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in a TensorBoard log directory, read by tensorboard's own reader: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(directory), size_guidance={"tensors": 0})  # 0: keep every point
    events.Reload()
    return {
        tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
    }


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose command line contains `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            data = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in data and state != "Z" and int(cmdline.parent.name) != os.getpid():
            found.append((int(cmdline.parent.name), data))
    return found


@pytest.fixture(autouse=True)
def nothing_left_running(request):
    """Pass or fail, a test leaves no run behind: every Slurm job submitted under its tmp_path is cancelled
    and every process started for a run there (whose command line names the run directory) is killed."""
    # asked for here, tmp_path is torn down after this fixture, so its run directories are still there
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    records = [json.loads(p.read_text()) for p in tmp.rglob("slurm.json")]
    jobs = [job for r in records for job in (r.get("job_id"), *r.get("groups", {}).values())]  # (slurm.layout: jobs)
    jobs += [
        m["job_id"].split("_")[0]
        for p in tmp.rglob("sweep.json")
        for m in json.loads(p.read_text()).get("members", [])
        if m.get("job_id")
    ]
    if any(jobs) and shutil.which("scancel"):  # (a test that faked its jobs on a machine without Slurm: none to cancel)
        subprocess.run(["scancel", *{str(j) for j in jobs if j}], capture_output=True, timeout=30)
    for pid, _ in processes_mentioning(str(tmp)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def cluster_profile():
    """Every test, and every srl-launch it starts, composes clusters/local.yaml under each experiment, as
    `export SRL_PROFILE=clusters/local.yaml` does for a user of the project's local Slurm: the shipped experiments
    carry no cluster settings, and where that cluster answers, a plan is checked against it (the Slurm tier, and
    any dry run or prepare here). Never the developer's own $SRL_PROFILE. A test about profiles, or about an
    experiment as written, sets or removes SRL_PROFILE itself (its monkeypatch comes after this one). Not through
    monkeypatch: that would set monkeypatch up before nothing_left_running, whose teardown would then still see a
    test's faked PATH (a fake scancel that never answers)."""
    before = os.environ.get("SRL_PROFILE")
    os.environ["SRL_PROFILE"] = str(LOCAL_PROFILE)
    yield
    if before is None:
        os.environ.pop("SRL_PROFILE", None)
    else:
        os.environ["SRL_PROFILE"] = before


@pytest.fixture
def nolock_env(tmp_path):
    """The environment of a process for which every file under tmp_path refuses locks (tests/nolock_shim.c,
    an LD_PRELOAD shim: ENOLCK, as NFS without lockd answers)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build tests/nolock_shim.c, the lock-refusing shim")
    shim = tmp_path / "nolock.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(shim), str(ROOT / "tests" / "nolock_shim.c"), "-ldl"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    env = dict(os.environ, LD_PRELOAD=str(shim), NOLOCK_PREFIX=str(tmp_path))
    env.pop("HDF5_USE_FILE_LOCKING", None)  # it would override what the code asks for
    return env


def contract_of(envs, algorithm: str = "ppo", state_size: int = 0):
    """The message contract of a vector env's spaces (srl_hpc/streams/contract.py), as handlers build it."""
    from srl_hpc.algorithm_spec import SPECS
    from srl_hpc.streams.contract import ActionContract, Contract, ObsContract

    return Contract(
        ObsContract(envs.single_observation_space),
        ActionContract(envs.single_action_space),
        SPECS[algorithm],
        state_size,
    )


# ------------------------------------------------------------------ the Slurm tier (@pytest.mark.slurm)

SLURM_NODE_UP = ("idle", "mixed", "allocated", "completing", "planned", "reserved")


def slurm_unavailable(timeout: float = 20) -> str | None:
    """Why the local Slurm cannot take a test's jobs (no sinfo, no controller answering, no node up), or None."""
    if shutil.which("sinfo") is None:
        return "sinfo is not on PATH: Slurm is not installed here (make slurm-install, then make slurm-up)"
    try:
        proc = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {timeout:g}s: no Slurm controller answers (make slurm-up)"
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        last = said[-1] if said else "no output"
        return f"sinfo failed (exit {proc.returncode}: {last}): is Slurm up? (make slurm-up)"
    states = proc.stdout.split()
    if not any(s.rstrip("~#!%$@^-") in SLURM_NODE_UP for s in states):  # ("*" marks a node not responding)
        return f"Slurm answers but no node can run jobs (node states: {', '.join(states) or 'none'})"
    return None


@pytest.hookimpl(trylast=True)  # after -m has deselected: no sinfo call unless a Slurm test is to run
def pytest_collection_modifyitems(config, items):
    """Slurm tests skip, saying why, where no cluster answers; with SRL_REQUIRE_SLURM=1 (make test, CI) the
    session stops instead, so that a cluster that failed to start cannot pass as skipped tests."""
    wanted = [item for item in items if item.get_closest_marker("slurm")]
    reason = slurm_unavailable() if wanted else None
    if reason is None:
        return
    if os.environ.get("SRL_REQUIRE_SLURM") == "1":
        raise pytest.UsageError(f"SRL_REQUIRE_SLURM=1 but {len(wanted)} Slurm tests cannot run: {reason}")
    for item in wanted:
        item.add_marker(pytest.mark.skip(reason=f"no Slurm cluster: {reason}"))


# ------------------------------------------------------------------ Slurm, real and faked


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """fake_bin(name, body): an executable `name` running the shell `body`, found before the real one."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")

    def make(name, body):
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        return path

    return make


def slurm_run(tmp_path, status_="succeeded", job_id="100", chain=()) -> RunDir:
    """A submitted run directory (its experiment, slurm.json, a controller log and, unless None, a summary)."""
    exp, run = runs.create(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"), tmp_path / "run")
    run.slurm.write_text(json.dumps({"job_id": job_id, "command": "test", **({"chain": list(chain)} if chain else {})}))
    run.log("controller/0").write_text("progress line\n")
    if status_ is not None:
        run.summary.write_text(
            json.dumps(
                {
                    "status": status_,
                    "reason": "wall time reached: 5s",
                    "wall_time": 5.0,
                    "env_frames": 1000,
                    "frames_consumed": 900,
                    "policy_version": 3,
                }
            )
        )
    return run


SHORT_SLURM_RUN = """\
name: {name}
env: {{id: {env_id}, kwargs: {kwargs}}}
workers:
  actor: {{count: 2, ring_size: 4, inference_splits: 2, segment_length: 32}}
  trainer: {{batch_segments: 4, checkpoint_interval: 2}}
stop: {{wall_time: {wall_time}}}
monitor: {{status_interval: 1}}
slurm:
  time: "00:10:00"
  network: ib0
  trainer: {{partition: gpu, mem_per_task: 1G}}
  policy: {{partition: gpu, mem_per_task: 1G}}
  actor: {{partition: cpu, mem_per_task: 1G, tasks_per_node: 2}}
  sweep: {{partition: cpu, cpus: 2, mem: 2G, time: "00:10:00"}}
"""


def experiment(tmp_path, name="short", env_id="CartPole-v1", kwargs="{}", wall_time=5):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SHORT_SLURM_RUN.format(name=name, env_id=env_id, kwargs=kwargs, wall_time=wall_time))
    return path


def srl(*args, timeout: float = 300, env=None, cwd=None, prefix=()) -> subprocess.CompletedProcess:
    """How a test runs `srl-launch ARGS` (any subcommand, a run included) to its end, its output captured; `prefix`
    goes before the command (prlimit, ...). Past `timeout` seconds the test fails with the output so far and,
    for a run, where its processes hang."""
    command = [*map(str, prefix), script("srl-launch"), *map(str, args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        hangs = where_it_hangs(Path(command[command.index("--run-dir") + 1])) if "--run-dir" in command else ""
        raise AssertionError(
            f"{' '.join(command)} ran past {timeout:g}s; its output:\n{out[-6000:]}\n{hangs}"
        ) from None


def srl_started(*args) -> tuple[subprocess.Popen, Output]:
    """How a test starts `srl-launch ARGS` in the background, to act on the run while it runs: the process and its
    output (stdout and stderr together), read line by line."""
    command = [script("srl-launch"), *map(str, args)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, Output(proc)


def where_it_hangs(run_dir: Path) -> str:
    """For a run that outlived its test: the job's state, the processes left, and their Python stacks (a
    worker's faulthandler writes them to its log on SIGABRT), so that a rare hang in CI says where it was."""
    lines, job_id = [], None
    if (run_dir / "slurm.json").exists():
        job_id = json.loads((run_dir / "slurm.json").read_text())["job_id"]
        lines.append(
            subprocess.run(
                ["squeue", "-j", job_id, "-o", "%i %T %R"], capture_output=True, text=True, timeout=60
            ).stdout
        )
    left = processes_mentioning(str(run_dir))
    lines += [f"left: {pid} {cmd}" for pid, cmd in left]
    for pid, cmd in left:
        if "srl_hpc.worker" in cmd:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
    with contextlib.suppress(AssertionError):  # workers whose stacks take longer are reported as still there
        wait_until(
            lambda: not any("srl_hpc.worker" in c for _, c in processes_mentioning(str(run_dir))),
            5,
            "the workers to write their stacks and end",
            interval=0.2,
        )
    if job_id is not None:  # after the stacks: a scancel would first wind the workers down
        subprocess.run(["scancel", job_id], timeout=60)
    for log in sorted((run_dir / "logs").glob("*.log")):
        text = log.read_text(errors="replace")
        if " ended" not in text or "Current thread" in text or "Thread 0x" in text:
            lines.append(f"---- {log.name}:\n" + "\n".join(text.splitlines()[-40:]))
    return "\n".join(lines)


def het_nodes(job_id):
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=60).stdout
    return [f.split("=", 1)[1] for line in out.splitlines() for f in line.split() if f.startswith("NodeList=")]


def no_process_left(run_dir, timeout=30):
    """Every process of the job ends; if one does not, the failure lists the ones left (pid, command line)."""
    wait_until(
        lambda: not processes_mentioning(str(run_dir)),
        timeout,
        "the job's processes to end",
        lambda: f"still running: {processes_mentioning(str(run_dir))}",
        interval=0.5,
    )
