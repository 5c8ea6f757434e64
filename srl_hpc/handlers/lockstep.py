"""Data-parallel trainers of one policy (torch DDP) in lockstep: before every update they agree, in one tiny
all-reduce, that each holds a batch and none is stopping, so they all run the same updates and all stop
together. trainer/0 serves the TCPStore the others join through."""

from __future__ import annotations

import datetime
import random
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from srl_hpc.streams import endpoints

DDP_TIMEOUT = datetime.timedelta(seconds=120)  # trainers joining, and any one collective


def ddp_backend(gpus: list[str]) -> str:
    """NCCL between GPUs, one per trainer; gloo where two trainers landed on one GPU (a node with fewer GPUs
    than trainers, as on a one-GPU workstation): NCCL refuses two ranks on one device."""
    return "nccl" if len(set(gpus)) == len(gpus) else "gloo"


def _serve_store() -> dist.TCPStore:
    """trainer/0's TCPStore, on a port of slurm.ports when the run has a range."""
    numbers = endpoints.free_port_numbers()
    if numbers is None:
        return dist.TCPStore("0.0.0.0", 0, None, True, timeout=DDP_TIMEOUT, wait_for_workers=False)
    for port in random.sample(numbers, min(len(numbers), 100)):
        try:
            return dist.TCPStore("0.0.0.0", port, None, True, timeout=DDP_TIMEOUT, wait_for_workers=False)
        except RuntimeError:  # taken
            continue
    raise RuntimeError(f"no free port for the trainers' TCPStore in slurm.ports {numbers.start}-{numbers.stop - 1}")


class Lockstep:
    def __init__(self, name: str, peers: list[str], device: torch.device) -> None:
        self.name = name
        self.peers = peers  # the policy's trainers, by rank
        self.rank = peers.index(name)
        self.device = device
        self._store: dist.TCPStore | None = None

    def bind(self) -> dict[str, int]:
        """trainer/0: the store's port, under the DDP endpoint of the rendezvous table."""
        if self.rank != 0:
            return {}
        self._store = _serve_store()
        return {endpoints.DDP: self._store.port}

    def connect(self, table: dict, model: torch.nn.Module) -> DistributedDataParallel:
        """Joins the process group; returns the model's DDP wrapper, which averages gradients across trainers
        in backward()."""
        store = self._store
        if store is None:
            leader = table[self.peers[0]]
            store = dist.TCPStore(leader["host"], leader["ports"][endpoints.DDP], None, False, timeout=DDP_TIMEOUT)
        dist.init_process_group(
            self._backend(store), store=store, rank=self.rank, world_size=len(self.peers), timeout=DDP_TIMEOUT
        )
        return DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None)

    def _backend(self, store) -> str:
        if self.device.type != "cuda":
            return "gloo"
        store.set(f"gpu/{self.rank}", f"{socket.gethostname()}/{torch.cuda.get_device_properties(self.device).uuid}")
        gpus = [store.get(f"gpu/{i}").decode() for i in range(len(self.peers))]
        backend = ddp_backend(gpus)
        if backend == "gloo":
            print(
                f"[{self.name}] trainers share a GPU ({', '.join(gpus)}): NCCL cannot run two ranks on one "
                f"device, so DDP uses gloo (slower); give each trainer its own GPU for NCCL",
                flush=True,
            )
        return backend

    def agree(self, keep_running: bool, have_batch: bool) -> tuple[bool, bool]:
        """(every trainer keeps running, every trainer holds a batch): one all-reduce of both."""
        flags = torch.tensor(
            [int(keep_running), int(have_batch)], device=self.device if self.device.type == "cuda" else "cpu"
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        return bool(flags[0]), bool(flags[1])

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
