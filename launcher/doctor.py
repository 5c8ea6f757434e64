"""`srl-launch doctor [EXP.yaml]`: is this environment ready for a first submission? One line per check.

Each check is a small function returning (status, message, fix): status "ok", "warn" or "FAIL"; the fix
says what to do (for a warn: what it means). The probes (running python, srun, reading /proc/mounts) are
kept apart from the pure functions that judge what they found, which the unit tests call directly.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import cast

from launcher import overrides, probe, slurm
from launcher.findings import FAIL, OK, WARN, Result
from launcher.mounts import filesystem_of
from launcher.settings import add_profile_option, profile_files
from srl_hpc import config
from srl_hpc.services import network

MIN_PYTHON = (3, 11)
MIN_SLURM = (20, 2)  # srun --het-group: one srun across the groups of a heterogeneous job
SHM_WARN_BYTES = 1 << 30
PROBE_TIMEOUT = 60.0  # seconds for a python probe (importing torch on a slow shared filesystem) or a Slurm command
MPI_FIX = (
    "install mpi4py against the cluster's MPI: module load <the MPI srun uses>; then "
    "MPICC=mpicc pip install --no-binary mpi4py mpi4py; or set slurm.mpi: none (workers meet through "
    "files in the run directory)"
)

HELP = """\
Check this environment before a first submission: python, torch and CUDA, mpi4py and its MPI library,
srun's MPI plugins, the Slurm version, the network interface the workers will use, the run directory's
filesystem and locks, and /dev/shm. One line per check: "ok: ...", "warn: ..." or "FAIL: ... -> fix: ...";
exit status 1 if any check failed.

On the login node it checks what srl-launch --slurm needs there. The workers run on compute nodes, whose
interfaces, GPUs and /dev/shm may differ: run it there too, in the partition the job will use, e.g.
  srun -N1 -p PARTITION [--gres=gpu:1] srl-launch doctor EXP.yaml

With --probe it submits one small job instead (the experiment's het groups, srun lines, container, node
setup and environment; a few minutes' limit; cancelled if the probe stops waiting) whose tasks measure what
the workers would meet, and reports the cluster's settings that matter (TaskPlugin, ProctrackType,
MpiDefault, het steps, limits propagation, QOS and association limits against the job's het components),
whether the het job ran, and per group: host and address, CPUs bound, GPUs (UUIDs), open-files limits, a ZMQ
round trip between every pair of groups, the file and MPI rendezvous, gloo (and NCCL) among the trainers.
With slurm.layout: jobs it submits the run's jobs instead, one per group, together, and reports whether
each group's job ran; their tasks meet through files (no MPI)."""


# ------------------------------------------------------------------------------------------ the checks


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Result:
    text = ".".join(map(str, version))
    if tuple(version[:2]) >= MIN_PYTHON:
        return OK, f"python {text} ({sys.executable})", ""
    return (
        FAIL,
        f"python {text} is older than {MIN_PYTHON[0]}.{MIN_PYTHON[1]}",
        "use python >= 3.11 (module load python/3.11, or a conda/venv environment with it)",
    )


TORCH_PROBE = """
import json, torch
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                  "hip": getattr(torch.version, "hip", None), "available": torch.cuda.is_available(),
                  "devices": torch.cuda.device_count()}))
"""


def judge_torch(found: dict | str, wants_cuda: bool) -> Result:
    """found: the probe's dict, or the error text when torch would not import."""
    if isinstance(found, str):
        return (
            FAIL,
            f"torch does not import: {found}",
            "install torch (the cluster's module or its CUDA build: pip install torch, see pytorch.org for the index)",
        )
    build = f"CUDA {found['cuda']}" if found.get("cuda") else f"ROCm {found['hip']}" if found.get("hip") else "CPU only"
    head = f"torch {found['version']} ({build})"
    if found["available"]:
        return OK, f"{head}, {found['devices']} GPU(s) visible here", ""
    if not wants_cuda:
        return OK, f"{head}, no GPU visible here; the experiment uses none", ""
    if not found.get("cuda") and not found.get("hip"):
        return (
            FAIL,
            f"{head}, but the experiment asks for cuda devices",
            "install a CUDA build of torch (the cluster's module, or pip install torch from the index for its CUDA)",
        )
    return (
        WARN,
        f"{head}, no GPU visible on this node (CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), and the experiment asks for cuda devices",
        "GPU nodes are checked where the job runs: srun -N1 -p GPU_PARTITION --gres=gpu:1 srl-launch doctor EXP.yaml",
    )


# MPI_Get_library_version may be called before MPI_Init; rc.initialize = False keeps the import from
# initializing MPI (which would need a launcher, and would make this process a rank)
MPI_PROBE = """
import json, mpi4py
mpi4py.rc.initialize = False
found = {"version": mpi4py.__version__}
try:
    from mpi4py import MPI
except Exception as e:
    found["library_error"] = f"{type(e).__name__}: {e}"
else:
    found["library"] = MPI.Get_library_version().strip("\\0 \\n").splitlines()[0].strip()  # Open MPI ends it in a NUL
    found["standard"] = "%d.%d" % MPI.Get_version()
print(json.dumps(found))
"""


def judge_mpi(found: dict | str, mpi: str) -> Result:
    """found: the probe's dict, or the error text when mpi4py would not import; mpi: slurm.mpi."""
    needed = mpi != "none"
    why = f"slurm.mpi is {mpi}: workers meet through MPI"
    if isinstance(found, str) or "library_error" in found:
        problem = (
            f"mpi4py does not import: {found}"
            if isinstance(found, str)
            else f"mpi4py {found['version']} imports, but not its MPI library: {found['library_error']}"
        )
        if needed:
            return FAIL, f"{problem} ({why})", MPI_FIX
        return OK, f"{problem}; slurm.mpi: none needs no MPI", ""
    return OK, f"mpi4py {found['version']}, MPI library: {found['library']} (MPI {found['standard']})", ""


def judge_plugins(plugins: list[str] | str, mpi: str) -> Result:
    """plugins: `srun --mpi=list`'s (slurm.mpi_plugins), or the error text."""
    if isinstance(plugins, str):
        return FAIL, f"srun --mpi=list: {plugins}", "run the doctor on the cluster's login node (or module load slurm)"
    if mpi in plugins:
        return OK, f"srun --mpi={mpi} (slurm.mpi) is one of srun's MPI plugins: {', '.join(plugins)}", ""
    return (
        FAIL,
        f"slurm.mpi is {mpi}, but srun has no such MPI plugin (it has: {', '.join(plugins)})",
        "set slurm.mpi to one of them, or none (workers meet through files in the run directory)",
    )


def judge_slurm_version(text: str | None) -> Result:
    """text: `sinfo --version`'s output ("slurm 23.02.4", "slurm-wlm 22.05.8"), None when sinfo is missing."""
    if text is None:
        return (
            FAIL,
            "sinfo not found: no Slurm commands on PATH",
            "run the doctor on the cluster's login node (or module load slurm)",
        )
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        return (
            WARN,
            f"Slurm version not understood: {text.strip()!r}",
            f"heterogeneous jobs (srun --het-group) need Slurm >= {MIN_SLURM[0]}.{MIN_SLURM[1]:02d}",
        )
    version = (int(match.group(1)), int(match.group(2)))
    if version >= MIN_SLURM:
        return OK, f"Slurm {match.group(0)}: heterogeneous jobs with srun --het-group supported", ""
    return (
        FAIL,
        f"Slurm {match.group(0)} is older than {MIN_SLURM[0]}.{MIN_SLURM[1]:02d}: no srun --het-group",
        "srl-launch --slurm submits one heterogeneous job; it needs Slurm >= 20.02 (ask the cluster's admins)",
    )


def judge_network(
    setting: str | None, resolve: Callable = network.resolve, interfaces: Callable = network.interfaces
) -> Result:
    """The address workers on this node would bind and advertise (srl_hpc.services.network.resolve)."""
    listing = (
        ", ".join(f"{n} {'/'.join(ips)}" for n, ips in sorted(interfaces().items()) if ips)
        or "none has an IPv4 address"
    )
    try:
        address = resolve(setting)
    except network.NetworkError as e:
        return (
            FAIL,
            str(e),
            f"set {network.SETTING} to one of this node's interfaces ({listing}) or a network (10.0.0.0/8)",
        )
    if address.loopback:
        return (
            FAIL,
            f"workers on node {socket.gethostname()} would advertise {address.describe()}, a loopback "
            f"address the job's other nodes cannot reach",
            f"set {network.SETTING} to the interface that connects the nodes (e.g. ib0) or its network "
            f"(10.0.0.0/8); this node's interfaces: {listing}",
        )
    return OK, f"workers on node {socket.gethostname()} bind and advertise {address.describe()}", ""


def existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_run_directory(run_dir: Path, mounts_file: str = "/proc/mounts") -> list[Result]:
    """Where runs would go: its filesystem, whether it is writable, and whether fcntl locks work there."""
    here = existing_ancestor(run_dir)
    try:
        mounts = Path(mounts_file).read_text()
    except OSError:
        mounts = ""
    point, kind = filesystem_of(here.resolve(), mounts)
    where = f"run directory {run_dir}" + ("" if here == run_dir else f" (not there yet; {here} is)")
    try:
        scratch = tempfile.NamedTemporaryFile(dir=here, prefix=".srl-doctor-")
    except OSError as e:
        return [
            (
                FAIL,
                f"{where}: cannot write there: {e}",
                "set run_dir (or --run-dir) to a directory you can write, on a filesystem every node mounts",
            )
        ]
    first = (OK, f"{where}: filesystem {kind} (mounted on {point}); a Slurm run's nodes must all see it", "")
    with scratch:
        return [first, judge_locks(scratch.fileno(), here)]


def judge_locks(fd: int, where: Path) -> Result:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as e:
        name = errno.errorcode.get(cast(int, e.errno), str(e.errno))
        return (
            WARN,
            f"fcntl locks refused in {where} ({name}: {e.strerror})",
            "traces are written without locks anyway (HDF5 file locking off): runs work here",
        )
    return OK, f"fcntl locks work in {where} (traces do not need them)", ""


def judge_shm(size: int | None, free: int | None = None) -> Result:
    """size, free: bytes of /dev/shm (None: there is none)."""
    if size is None:
        return (
            WARN,
            "no /dev/shm on this node",
            "the shared-memory inference transport (actors and policy workers on one node) needs it",
        )
    text = f"/dev/shm: {size / (1 << 30):.1f} GiB" + ("" if free is None else f", {free / (1 << 30):.1f} GiB free")
    if size < SHM_WARN_BYTES:
        return (
            WARN,
            f"{text}, less than {SHM_WARN_BYTES >> 30} GiB",
            "the shared-memory inference transport (actors and policy workers on one node) keeps its buffers there",
        )
    return OK, text, ""


def check_workers_python(exp: config.Experiment) -> Result | None:
    """Whether the python, torch and mpi4py lines are about the workers' environment at all."""
    s = exp.slurm
    if s.container is None and s.python is None:
        return None
    other = f"the container {s.container.image}" if s.container is not None else f"slurm.python {s.python!r}"
    return (
        WARN,
        f"workers run in {other}, not this python: the python, torch and mpi4py lines are about {sys.executable}",
        "run the doctor with that python (or in that container) on a compute node",
    )


# ------------------------------------------------------------------------------------------- the probes


def probe_python(code: str) -> dict | str:
    """Run `code` (which prints one JSON object) in this python: an import that crashes or hangs there cannot
    take the doctor with it. The dict, or the error text."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"no answer within {PROBE_TIMEOUT:g} s"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        return lines[-1]
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"unexpected output: {proc.stdout.strip()[-200:]!r}"


def slurm_version() -> str | None:
    try:
        proc = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        return f"sinfo --version: no answer within {PROBE_TIMEOUT:g} s"
    return proc.stdout or proc.stderr


def mpi_plugins() -> list[str] | str:
    try:
        return slurm.mpi_plugins()
    except slurm.SlurmError as e:
        return str(e)


def shm_size(path: str = "/dev/shm") -> tuple[int | None, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def wants_cuda(exp: config.Experiment) -> bool:
    return any(device.startswith("cuda") for device in (exp.workers.policy.device, exp.workers.trainer.device))


def checks(exp: config.Experiment) -> list[Callable[[], Result | None | list[Result]]]:
    run_dir = Path(exp.run_dir or "runs").resolve()
    return [
        check_python,
        lambda: check_workers_python(exp),
        lambda: judge_torch(probe_python(TORCH_PROBE), wants_cuda(exp)),
        lambda: judge_mpi(probe_python(MPI_PROBE), exp.slurm.mpi),
        lambda: judge_plugins(mpi_plugins(), exp.slurm.mpi),
        lambda: judge_slurm_version(slurm_version()),
        lambda: judge_network(exp.slurm.network),
        lambda: check_run_directory(run_dir),
        lambda: judge_shm(*shm_size()),
    ]


def line(result: Result) -> str:
    status, message, fix = result
    if status == FAIL:
        return f"FAIL: {message} -> fix: {fix}"
    return f"{status}: {message}" + (f" -> {fix}" if fix else "")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch doctor", description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "experiment",
        type=Path,
        nargs="?",
        help="the experiment to check for (its slurm.mpi, slurm.network, run_dir, devices); "
        "default: the defaults (slurm.mpi pmix, the hostname's address, ./runs)",
    )
    overrides.add(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    add_profile_option(p)
    p.add_argument(
        "--probe",
        action="store_true",
        help="submit one small job shaped as the experiment's; report what its tasks find there",
    )
    p.add_argument(
        "--run-dir", type=Path, help="with --probe: the probe job's directory (default: beside the experiment's runs)"
    )
    p.add_argument(
        "--probe-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --probe: seconds to wait for the job to start and end, then cancel it (default 600)",
    )
    return p


def main(argv) -> int:
    p = parser()
    args = p.parse_intermixed_args(argv)
    files = overrides.take(args, [*([args.experiment] if args.experiment else []), *args.overrides])
    if len(files) > 1:
        p.error(f"{str(files[1])!r} is neither KEY=VALUE nor an option (one experiment file: {files[0]})")
    args.experiment = files[0] if files else None
    if args.set and not args.experiment:
        p.error("--set needs an experiment file to override")
    profiles = profile_files(args.profile)
    if args.experiment:
        exp = config.load(args.experiment, profiles=profiles)
    elif profiles:  # the defaults, under the profiles (a cluster's settings)
        exp = config.loads("stop: {wall_time: 60}\n", profiles=profiles)
    else:
        exp = config.Experiment()
    if args.set:
        exp = config.with_overrides(exp, args.set)
    if args.probe:
        return _probe(p, args, exp, argv)
    if args.run_dir or args.probe_wait is not None:
        p.error("--run-dir and --probe-wait go with --probe")
    failed = False
    for check in checks(exp):
        found = check()
        for result in [] if found is None else found if isinstance(found, list) else [found]:
            print(line(result), flush=True)
            failed |= result[0] == FAIL
    return 1 if failed else 0


def _probe(p: argparse.ArgumentParser, args, exp: config.Experiment, argv) -> int:
    """--probe: the job's lines as they come (progress on stderr); exit 1 if any failed."""

    if not args.experiment:
        p.error("--probe needs an experiment file: the job is shaped as its run")
    command = "srl-launch doctor " + " ".join(shlex.quote(str(a)) for a in argv)
    failed = False
    wait = probe.WAIT if args.probe_wait is None else args.probe_wait
    for result in probe.run(exp, args.run_dir, command, wait):
        print(line(result), flush=True)
        failed |= result[0] == FAIL
    return 1 if failed else 0
