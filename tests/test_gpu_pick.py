"""Which GPU a CUDA worker takes, from what its task sees (pure: the visible count and the environment are
passed in, so no GPU is needed)."""

import pytest
import torch

from srl_hpc.models.devices import pick_gpu, resolve_device

WHOLE_NODE = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "0,1", "SLURM_JOB_GPUS": "0,1"}
OWN_GPU = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}  # --gpus-per-task


def test_a_task_that_sees_its_nodes_whole_set_picks_by_its_index_among_the_nodes_cuda_workers():
    assert [pick_gpu(f"trainer/{i}", i, 2, False, WHOLE_NODE) for i in range(2)] == [0, 1]
    assert pick_gpu("trainer/1", 1, 4, False, {}) == 1  # a node with more GPUs than CUDA workers


def test_a_task_that_sees_only_its_own_gpu_takes_device_0_whatever_its_index():
    """--gpus-per-task, or ConstrainDevices=yes: the second CUDA worker of a node is not refused."""
    assert pick_gpu("trainer/1", 1, 1, False, OWN_GPU) == 0
    assert pick_gpu("policy/3", 3, 1, False, {"CUDA_VISIBLE_DEVICES": "0"}) == 0


def test_a_task_that_sees_fewer_gpus_than_its_index_needs_shares_only_if_allowed():
    sees_two = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "2,3"}
    assert pick_gpu("policy/2", 2, 2, True, sees_two) == 0  # round-robin: share_gpu, or local mode
    assert pick_gpu("policy/3", 3, 2, True, sees_two) == 1
    with pytest.raises(RuntimeError) as refused:
        pick_gpu("policy/2", 2, 2, False, sees_two)
    message = str(refused.value)
    assert message.startswith("policy/2 is CUDA worker 2 of its node, which shows 2 GPU(s)")
    assert "CUDA_VISIBLE_DEVICES=0,1" in message and "SLURM_STEP_GPUS=2,3" in message
    assert "SLURM_JOB_GPUS=unset" in message and "share_gpu: true" in message


def test_a_task_that_sees_no_gpu_is_an_error_naming_the_worker_and_what_it_was_given():
    with pytest.raises(RuntimeError) as refused:
        pick_gpu("trainer/0", 0, 0, True, {"CUDA_VISIBLE_DEVICES": ""}, "No CUDA GPUs are available")
    message = str(refused.value)
    assert message.startswith("trainer/0 is on device cuda, but its task sees no GPU: No CUDA GPUs are available")
    assert "CUDA_VISIBLE_DEVICES=, SLURM_STEP_GPUS=unset" in message


def cpu_build_init():
    raise AssertionError("Torch not compiled with CUDA enabled")  # torch.cuda.init() of a CPU build


def test_resolve_device_takes_other_devices_as_named_and_says_why_torch_sees_no_gpu(monkeypatch):
    assert resolve_device("cpu", 3, False, "actor/0") == torch.device("cpu")
    assert resolve_device("cuda:1", 0, False, "policy/0") == torch.device("cuda", 1)  # pinned by the experiment
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "init", cpu_build_init)
    with pytest.raises(RuntimeError, match="^trainer/0 is on device cuda, but its task sees no GPU: Torch not comp"):
        resolve_device("cuda", 0, False, "trainer/0")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # its own GPU only
    assert resolve_device("cuda", 1, False, "trainer/1") == torch.device("cuda", 0)
