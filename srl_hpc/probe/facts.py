"""What a probe task measures of its node before meeting anyone: host, address, CPUs bound, GPUs seen, open-files
limits against its worker's need."""

from __future__ import annotations

import os
import platform
import resource
import socket
import sys
from typing import Any

from srl_hpc import graph as wiring
from srl_hpc.probe import error_text
from srl_hpc.services import limits, network

# what says which GPUs a task sees (the same as srl_hpc.models.devices.GPU_VARIABLES, which imports torch)
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def gpu_facts(want_torch: bool) -> dict:
    """The GPU variables this task has, and torch's view where it is wanted (trainers, CUDA workers, tasks
    that were given GPUs): whether it sees CUDA, and each visible device's name and UUID."""
    found: dict = {"env": {v: os.environ.get(v) for v in GPU_VARIABLES}, "torch": None}
    if not want_torch:
        return found
    try:
        import torch
    except Exception as e:  # noqa: BLE001  any import failure is a finding
        found["torch"] = {"error": f"torch does not import: {error_text(e)}"}
        return found
    view: dict = {"version": torch.__version__, "cuda_build": torch.version.cuda, "devices": []}
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                view["devices"].append({"index": i, "name": props.name, "uuid": str(props.uuid)})
        else:
            try:
                torch.cuda.init()
            except (AssertionError, RuntimeError) as e:  # torch's reason: no CUDA build, no driver, no GPU
                view["why_none"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    except Exception as e:  # noqa: BLE001
        view["error"] = error_text(e)
    found["torch"] = view
    return found


def gpu_pick(exp, graph: wiring.Graph, name: str, gpus: dict) -> dict | None:
    """For a worker on device cuda: which visible GPU it would take (srl_hpc.models.devices.pick_gpu) and that GPU's
    identity, its UUID where torch sees it (else the node's GPU number Slurm gave); None for a CPU worker."""
    node = graph.worker(name)
    if not node.device.startswith("cuda"):
        return None
    view = gpus.get("torch") or {}
    devices = view.get("devices", [])
    if node.device != "cuda":  # "cuda:N": taken as named
        index = int(node.device.partition(":")[2])
    else:
        from srl_hpc.models.devices import pick_gpu  # (imports torch: only CUDA workers get here)

        local_id = int(os.environ.get("SLURM_LOCALID", "0"))
        share = getattr(exp.slurm, node.group).share_gpu
        try:
            index = pick_gpu(
                name,
                graph.gpu_index(name, local_id),
                len(devices),
                share,
                os.environ,
                view.get("why_none", view.get("error", "")),
            )
        except RuntimeError as e:
            return {"error": str(e)}
    if index >= len(devices):
        return {"index": index, "error": f"{name} is on device {node.device}, but its task sees {len(devices)} GPU(s)"}
    return {"index": index, "uuid": devices[index]["uuid"], "name": devices[index]["name"]}


def measure(exp, graph: wiring.Graph, name: str) -> dict:
    """Everything phase 1 records about this task, and the address (None when it could not be chosen)."""
    node = graph.worker(name)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    gpus_given = any(os.environ.get(v) for v in GPU_VARIABLES)
    is_trainer = node.kind == "trainer"
    facts: dict[str, Any] = {
        "worker": name,
        "group": node.group,
        "kind": node.kind,
        "device": node.device,
        "task": int(os.environ.get("SLURM_PROCID", "-1")),
        "local_id": int(os.environ.get("SLURM_LOCALID", "-1")),
        "node": os.environ.get("SLURMD_NODENAME", platform.node()),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "python": sys.executable,
        "python_version": platform.python_version(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "node_cpus": os.cpu_count(),
        "nofile": {
            "soft": None if soft == unlimited else soft,
            "hard": None if hard == unlimited else hard,
            "needed": limits.descriptors_needed(graph, name),
            "workers": len(graph.names),
        },
        "address": None,
        "address_error": None,
    }
    try:
        address = network.resolve(exp.slurm.network)
        facts["address"] = {
            "ip": address.ip,
            "interface": address.interface,
            "source": address.source,
            "loopback": address.loopback,
        }
    except network.NetworkError as e:
        facts["address_error"] = str(e)
    facts["gpus"] = gpu_facts(want_torch=gpus_given or is_trainer or node.device.startswith("cuda"))
    facts["gpu_pick"] = gpu_pick(exp, graph, name, facts["gpus"])
    return facts
