"""Which torch device a worker runs on: the GPU its task sees (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS,
SLURM_JOB_GPUS), its index among the node's CUDA workers, or the CPU."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")  # what says which GPUs a task sees


def pick_gpu(
    worker: str, gpu_index: int, visible: int, may_share: bool, env: Mapping[str, str], no_gpu: str = ""
) -> int:
    """Which of the `visible` GPUs its task sees a worker on device 'cuda' takes. `gpu_index`, its index
    among its node's CUDA workers (srl_hpc.graph.Graph.gpu_index), is right where the task sees the node's
    whole set; with --gpus-per-task or ConstrainDevices=yes a task sees only its own GPU, as device 0. Seeing
    fewer than its index needs, workers share them round-robin only if `may_share` (local mode,
    slurm.<group>.share_gpu): else two would meet on one GPU unasked. `env` is quoted in errors; `no_gpu`:
    torch's word on why it sees none."""
    seen = ", ".join(f"{name}={env.get(name, 'unset')}" for name in GPU_VARIABLES)
    if visible == 0:
        raise RuntimeError(
            f"{worker} is on device cuda, but its task sees no GPU{': ' + no_gpu if no_gpu else ''} ({seen})"
        )
    if visible == 1:
        return 0
    if gpu_index < visible or may_share:
        return gpu_index % visible
    raise RuntimeError(
        f"{worker} is CUDA worker {gpu_index} of its node, which shows {visible} GPU(s) to its "
        f"task ({seen}); set the group's slurm gpus_per_node, or share_gpu: true to let workers "
        f"share one"
    )


def resolve_device(device: str, gpu_index: int, may_share: bool, worker: str) -> torch.device:
    """'cuda' means the GPU pick_gpu picks among those this task sees; any other device is taken as named."""
    if device != "cuda":
        return torch.device(device)
    visible, no_gpu = torch.cuda.device_count(), ""
    if visible == 0:
        try:
            torch.cuda.init()
        except (AssertionError, RuntimeError) as e:  # torch's reason: no CUDA build, no driver, no GPU
            no_gpu = str(e)
    return torch.device("cuda", pick_gpu(worker, gpu_index, visible, may_share, os.environ, no_gpu))
