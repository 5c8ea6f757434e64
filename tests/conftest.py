import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Run directories must be on a filesystem every node sees: the local Slurm's nodes each have a /tmp of
# their own, as a real cluster's do (scripts/local_slurm.sh), so tmp_path is under /var/tmp instead.
tempfile.tempdir = os.environ.get("SRL_TEST_TMPDIR", "/var/tmp")


@pytest.fixture
def python():
    """The interpreter the tests run under; its bin/ holds srl-launch and srl-trace."""
    return sys.executable


def script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in a TensorBoard log directory, read by tensorboard's own reader: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(directory), size_guidance={"tensors": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
            for tag in events.Tags()["tensors"]}


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
    jobs = [json.loads(p.read_text()).get("job_id") for p in tmp.rglob("slurm.json")]
    jobs += [m["job_id"].split("_")[0] for p in tmp.rglob("sweep.json")
             for m in json.loads(p.read_text()).get("members", []) if m.get("job_id")]
    if any(jobs):
        subprocess.run(["scancel", *{str(j) for j in jobs if j}], capture_output=True, timeout=30)
    for pid, _ in processes_mentioning(str(tmp)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def nolock_env(tmp_path):
    """The environment of a process for which every file under tmp_path refuses locks (tests/nolock_shim.c,
    an LD_PRELOAD shim: ENOLCK, as NFS without lockd answers)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build tests/nolock_shim.c, the lock-refusing shim")
    shim = tmp_path / "nolock.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(shim), str(ROOT / "tests" / "nolock_shim.c"), "-ldl"],
                   check=True, capture_output=True, timeout=60)
    env = dict(os.environ, LD_PRELOAD=str(shim), NOLOCK_PREFIX=str(tmp_path))
    env.pop("HDF5_USE_FILE_LOCKING", None)  # it would override what the code asks for
    return env


def contract_of(envs, algorithm: str = "ppo", state_size: int = 0):
    """The message contract of a vector env's spaces (srl_hpc/streams/contract.py), as handlers build it."""
    from srl_hpc.algorithms import SPECS
    from srl_hpc.streams.contract import ActionContract, Contract, ObsContract

    return Contract(ObsContract(envs.single_observation_space), ActionContract(envs.single_action_space),
                    SPECS[algorithm], state_size)
