"""`srl-launch doctor`: the judgements one by one, then the command on this machine, with an environment
broken one thing at a time (no mpi4py, a filesystem that refuses locks), and on a node of the local Slurm,
whose hostname resolves to a loopback address as Debian's do."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import srl
from launcher import doctor
from launcher.mounts import filesystem_of
from srl_hpc.services import network


def experiment(directory: Path, **slurm) -> Path:
    """A small experiment whose runs would go to directory/runs, with these slurm settings."""
    lines = ["name: doctor", "stop: {wall_time: 60}", f"run_dir: {directory / 'runs'}"]
    if slurm:
        lines.append("slurm: {" + ", ".join(f"{k}: {v}" for k, v in slurm.items()) + "}")
    path = directory / "doctor.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def reachable_interface() -> str:
    """An interface of this machine with a non-loopback IPv4 address (the good case's slurm.network)."""
    for name, ips in sorted(network.interfaces().items()):
        if any(not ip.startswith("127.") for ip in ips):
            return name
    pytest.skip("this machine has no interface with a non-loopback IPv4 address")


def doctor_run(*args, env=None, prefix=(), timeout=180) -> tuple[int, list[str]]:
    proc = srl("doctor", *map(str, args), timeout=timeout, env=env, prefix=[*prefix])
    return proc.returncode, proc.stdout.splitlines()


def the_line(lines: list[str], start: str) -> str:
    """The one line whose message (after "ok: ", "warn: " or "FAIL: ") starts with `start`."""
    found = [x for x in lines if x.split(": ", 1)[-1].startswith(start)]
    assert len(found) == 1, f"one line about {start!r} expected in:\n" + "\n".join(lines)
    return found[0]


def assert_all_ok(code: int, lines: list[str]) -> None:
    """Exit 0 and every check ok; without Slurm on this machine its two lines may fail (and only those)."""
    slurm_lines = ("srun --mpi=list", "sinfo not found") if shutil.which("srun") is None else ()
    bad = [x for x in lines if not x.startswith("ok: ") and not any(s in x for s in slurm_lines)]
    assert bad == [], "\n".join(lines)
    assert len(lines) == 9, "\n".join(lines)
    assert code == (1 if slurm_lines else 0), "\n".join(lines)


# ---------------------------------------------------------------------------------------- the judgements


def test_the_filesystem_is_the_longest_mount_point_holding_the_path_and_the_last_of_equal_ones():
    mounts = "\n".join(
        [
            "/dev/vda / ext4 rw 0 0",
            "server:/home /home nfs4 rw 0 0",
            "tmpfs /dev/shm tmpfs rw 0 0",
            "tmpfs /dev/shm tmpfs rw,size=1k 0 0",
            r"lustre:/scratch /scratch\040data lustre rw 0 0",
            "x /home2 xfs rw 0 0",
        ]
    )
    assert filesystem_of(Path("/home/me/runs"), mounts) == ("/home", "nfs4")
    assert filesystem_of(Path("/home2/me"), mounts) == ("/home2", "xfs")
    assert filesystem_of(Path("/homeless"), mounts) == ("/", "ext4")
    assert filesystem_of(Path("/scratch data/runs"), mounts) == ("/scratch data", "lustre")
    assert filesystem_of(Path("/dev/shm"), mounts) == ("/dev/shm", "tmpfs")
    assert filesystem_of(Path("/x"), "") == ("/", "unknown")


def test_each_check_judges_ok_or_fail_and_a_failure_says_its_fix():
    assert doctor.check_python((3, 11, 2))[0] == "ok"
    status, message, fix = doctor.check_python((3, 10, 12))
    assert status == "FAIL" and "3.10.12" in message and "3.11" in fix

    assert doctor.judge_slurm_version("slurm-wlm 22.05.8\n")[0] == "ok"
    assert doctor.judge_slurm_version("slurm 20.02.0")[0] == "ok"
    status, message, fix = doctor.judge_slurm_version("slurm 19.05.5")
    assert status == "FAIL" and "--het-group" in message and "20.02" in fix
    assert doctor.judge_slurm_version(None)[0] == "FAIL"

    plugins = ["pmix", "none", "pmi2", "pmix_v4"]
    assert doctor.judge_plugins(plugins, "pmix")[0] == "ok"
    status, message, fix = doctor.judge_plugins(["none", "cray_shasta"], "pmix")
    assert status == "FAIL" and "none, cray_shasta" in message and "slurm.mpi" in fix
    assert doctor.judge_plugins("srun not found: is this a Slurm login node?", "pmix")[0] == "FAIL"

    missing = "ModuleNotFoundError: No module named 'mpi4py'"
    status, message, fix = doctor.judge_mpi(missing, "pmix")
    assert status == "FAIL" and "MPICC=mpicc pip install --no-binary mpi4py mpi4py" in fix and "slurm.mpi: none" in fix
    assert doctor.judge_mpi({"version": "4.1.2", "library_error": "libmpi.so.40: cannot open"}, "pmi2")[0] == "FAIL"
    assert doctor.judge_mpi(missing, "none")[0] == "ok"
    found = {"version": "4.1.2", "library": "Open MPI v4.1.4", "standard": "3.1"}
    assert doctor.judge_mpi(found, "pmix") == ("ok", "mpi4py 4.1.2, MPI library: Open MPI v4.1.4 (MPI 3.1)", "")


def test_torch_without_a_gpu_here_is_only_a_warning_when_the_experiment_wants_cuda():
    cuda_build = {"version": "2.5.1+cu124", "cuda": "12.4", "hip": None, "available": False, "devices": 0}
    status, message, fix = doctor.judge_torch(cuda_build, wants_cuda=True)
    assert status == "warn" and "CUDA 12.4" in message and "where the job runs" in fix and "--gres=gpu" in fix
    assert doctor.judge_torch(cuda_build, wants_cuda=False)[0] == "ok"
    assert doctor.judge_torch(dict(cuda_build, available=True, devices=4), wants_cuda=True) == (
        "ok",
        "torch 2.5.1+cu124 (CUDA 12.4), 4 GPU(s) visible here",
        "",
    )
    cpu_build = dict(cuda_build, version="2.13.0+cpu", cuda=None)
    status, _, fix = doctor.judge_torch(cpu_build, wants_cuda=True)
    assert status == "FAIL" and "CUDA build of torch" in fix
    assert doctor.judge_torch("ModuleNotFoundError: No module named 'torch'", wants_cuda=False)[0] == "FAIL"


def test_a_loopback_address_fails_and_the_fix_names_slurm_network_and_the_interfaces():
    found = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5"], "ib0": ["10.1.0.5"], "docker0": []}
    loopback = network.Address("127.0.1.1", None, "hostname n7")
    status, message, fix = doctor.judge_network(None, resolve=lambda _: loopback, interfaces=lambda: found)
    assert status == "FAIL" and "127.0.1.1" in message and "loopback" in message
    assert "slurm.network" in fix and "eth0 10.0.0.5" in fix and "ib0 10.1.0.5" in fix and "docker0" not in fix

    def missing(_):
        raise network.NetworkError("slurm.network is 'ib1', but that interface does not exist on node n7")

    status, message, fix = doctor.judge_network("ib1", resolve=missing, interfaces=lambda: found)
    assert status == "FAIL" and "'ib1'" in message and "ib0 10.1.0.5" in fix
    good = network.Address("10.1.0.5", "ib0", "slurm.network: ib0")
    assert doctor.judge_network("ib0", resolve=lambda _: good, interfaces=lambda: found)[0] == "ok"


def test_a_small_dev_shm_is_a_warning_and_lines_read_as_promised():
    status, message, fix = doctor.judge_shm(64 << 20, 60 << 20)
    assert status == "warn" and "shared-memory inference transport" in fix
    assert doctor.judge_shm(8 << 30, 8 << 30)[0] == "ok"
    assert doctor.judge_shm(None)[0] == "warn"
    assert doctor.line(("FAIL", "it broke", "mend it")) == "FAIL: it broke -> fix: mend it"
    assert doctor.line(("warn", "odd", "harmless")) == "warn: odd -> harmless"
    assert doctor.line(("ok", "fine", "")) == "ok: fine"


# ------------------------------------------------------------------------------------- on this machine


@pytest.mark.slow
def test_a_ready_environment_passes_every_check(tmp_path):
    code, lines = doctor_run(experiment(tmp_path, network=reachable_interface()))
    assert_all_ok(code, lines)
    assert the_line(lines, "run directory").startswith(f"ok: run directory {tmp_path / 'runs'} (not there yet; ")
    assert the_line(lines, "fcntl locks").startswith("ok: fcntl locks work")


@pytest.mark.slow
def test_without_mpi4py_the_failure_says_how_to_build_it_against_the_clusters_mpi(tmp_path):
    stand_in = tmp_path / "no-mpi4py" / "mpi4py"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("raise ImportError('mpi4py is not installed (a stand-in)')\n")
    env = dict(os.environ, PYTHONPATH=str(stand_in.parent))
    exp = experiment(tmp_path, network=reachable_interface())
    code, lines = doctor_run(exp, env=env)
    line = the_line(lines, "mpi4py")
    assert code == 1 and line.startswith("FAIL: mpi4py does not import: ImportError: mpi4py is not installed"), line
    assert "slurm.mpi is pmix" in line and "-> fix: " in line
    assert "MPICC=mpicc pip install --no-binary mpi4py mpi4py" in line and "slurm.mpi: none" in line
    assert [x for x in lines if x.startswith("FAIL")] == [line]

    code, lines = doctor_run(exp, "--set", "slurm.mpi=none", env=env)  # no MPI needed: not a failure
    line = the_line(lines, "mpi4py")
    assert line.startswith("ok: mpi4py does not import") and line.endswith("slurm.mpi: none needs no MPI"), line
    assert_all_ok(code, lines)


@pytest.mark.slow
def test_refused_locks_are_a_warning_that_says_traces_do_not_need_them(tmp_path, nolock_env):
    code, lines = doctor_run(experiment(tmp_path, network=reachable_interface()), env=nolock_env)
    line = the_line(lines, "fcntl locks")
    assert (
        line == f"warn: fcntl locks refused in {tmp_path} (ENOLCK: No locks available) -> traces are "
        "written without locks anyway (HDF5 file locking off): runs work here"
    ), line
    assert code == 0 and not any(x.startswith("FAIL") for x in lines), "\n".join(lines)


def test_set_needs_an_experiment_and_a_bad_experiment_is_refused(tmp_path):
    proc = srl("doctor", "--set", "slurm.mpi=none", timeout=60)
    assert proc.returncode == 2 and "--set needs an experiment file" in proc.stderr
    (tmp_path / "bad.yaml").write_text("stop: {wall_time: 60}\nslurm: {netwrk: ib0}\n")
    proc = srl("doctor", tmp_path / "bad.yaml", timeout=60)
    assert proc.returncode == 2 and "netwrk" in proc.stderr and proc.stdout == ""  # an invalid experiment


# ------------------------------------------------------------------------ on a node of the local Slurm


@pytest.fixture
def shared_dir():
    """A directory every node of the local Slurm sees (each has a /tmp of its own): under /var/tmp."""
    path = Path(tempfile.mkdtemp(prefix="srl-doctor-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slurm
def test_on_a_node_whose_hostname_is_loopback_the_fix_names_slurm_network_and_its_interfaces(shared_dir, monkeypatch):
    monkeypatch.delenv("SRL_PROFILE")  # no profile names slurm.network (clusters/local.yaml, the Slurm tests', does)
    on_n2 = ["srun", "-N1", "-w", "n2"]
    code, lines = doctor_run(experiment(shared_dir), prefix=on_n2)
    line = the_line(lines, "workers on node")
    assert code == 1 and line.startswith("FAIL: workers on node n2 would advertise 127.0.1.1"), "\n".join(lines)
    fix = line.split(" -> fix: ", 1)[1]
    assert "slurm.network" in fix and "eth0 10.250.0.12" in fix and "ib0 10.250.1.12" in fix, line
    assert [x for x in lines if x.startswith("FAIL")] == [line]

    code, lines = doctor_run(experiment(shared_dir, network="ib0"), prefix=on_n2)
    assert_all_ok(code, lines)
    assert (
        the_line(lines, "workers on node")
        == "ok: workers on node n2 bind and advertise 10.250.1.12 (ib0; slurm.network: ib0)"
    )


@pytest.mark.slurm
def test_the_probe_job_of_cartpole_reports_every_line_ok_on_the_local_slurm(tmp_path):
    """`doctor --probe` submits one het job shaped as CartPole's run, on the local Slurm (with its cluster
    profile where there is one), and every line it prints is ok: the cluster's settings, the QOS limits, the
    het job, each group's address, CPUs, GPUs and open files, ZMQ between each pair of groups, the file and MPI
    rendezvous, gloo among the trainers."""
    profile = Path(__file__).resolve().parent.parent / "clusters" / "local.yaml"
    cartpole = Path(__file__).resolve().parent.parent / "experiments" / "cartpole_ppo.yaml"
    extra = ["--profile", profile] if profile.exists() else []
    code, lines = doctor_run(cartpole, "--probe", "--run-dir", tmp_path / "probe", *extra, timeout=540)
    expected = [
        "TaskPlugin=",
        "ProctrackType=",
        "MpiDefault=",
        "PropagateResourceLimits",
        "AccountingStorageEnforce=",
        "het job ",
        "file rendezvous",
        "ZMQ between trainer and policy",
        "ZMQ between trainer and actor",
        "ZMQ between policy and actor",
        "gloo all-reduce among 1 trainer task(s)",
        "NCCL",
        "MPI rendezvous",
    ]
    for start in expected:
        assert the_line(lines, start).startswith("ok: "), "\n".join(lines)
    assert any(x.split(": ", 1)[1].startswith(("QOS ", "no accounting")) for x in lines), "\n".join(lines)
    for group in ("trainer", "policy", "actor"):  # its address, CPUs, GPUs and open files
        assert len([x for x in lines if x.split(": ", 1)[1].startswith(f"group {group}")]) == 4, "\n".join(lines)
    assert all(x.startswith("ok: ") for x in lines) and code == 0, "\n".join(lines)
    assert (tmp_path / "probe" / "slurm.json").exists()  # (the autouse fixture cancels a job left behind)


@pytest.mark.slurm
def test_the_jobs_layouts_probe_of_cartpole_runs_a_job_per_group_every_line_ok_and_none_left_queued(tmp_path):
    """`doctor --probe` with slurm.layout: jobs submits CartPole's three group jobs with the probe's module (held,
    then released together), waits for all of them, and every line is ok: each group's job ran and their tasks
    met through files; MPI is not used. Every one of the jobs has completed when it returns."""
    root = Path(__file__).resolve().parent.parent
    code, lines = doctor_run(
        root / "experiments" / "cartpole_ppo.yaml",
        "--probe",
        "--run-dir",
        tmp_path / "probe",
        "--profile",
        root / "clusters" / "local.yaml",
        "--set",
        "slurm.layout=jobs",
        "--probe-wait",
        "60",
        timeout=85,
    )
    assert all(x.startswith("ok: ") for x in lines) and code == 0, "\n".join(lines)
    groups = json.loads((tmp_path / "probe" / "slurm.json").read_text())["groups"]
    assert list(groups) == ["trainer", "policy", "actor"]
    shown = ", ".join(f"{job} ({group})" for group, job in groups.items())
    assert (
        the_line(lines, "jobs ") == f"ok: jobs {shown}: each group's ordinary job ran and their tasks met through "
        "files in the probe directory (5 of 5 tasks started)"
    )
    assert the_line(lines, "MPI rendezvous").startswith("ok: MPI rendezvous: not used: slurm.layout: jobs")
    assert the_line(lines, "MpiDefault=").endswith(
        "each group's srun line says --mpi=none itself (slurm.layout: jobs: MPI cannot span jobs)"
    )
    assert the_line(lines, "SchedulerParameters=").startswith("ok: ")
    for start in (
        "file rendezvous",
        "ZMQ between trainer and policy",
        "ZMQ between trainer and actor",
        "ZMQ between policy and actor",
        "gloo all-reduce among 1 trainer task(s)",
    ):
        assert the_line(lines, start).startswith("ok: ")
    for group in ("trainer", "policy", "actor"):  # its address, CPUs, GPUs and open files
        assert len([x for x in lines if x.split(": ", 1)[1].startswith(f"group {group}")]) == 4, "\n".join(lines)
        assert " -m srl_hpc.probe " in (tmp_path / "probe" / f"job-{group}.sbatch").read_text()
    states = subprocess.run(
        ["squeue", "-h", "--states=all", "-j", ",".join(groups.values()), "-o", "%i|%T"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    assert sorted(states) == sorted(f"{job}|COMPLETED" for job in groups.values()), states
