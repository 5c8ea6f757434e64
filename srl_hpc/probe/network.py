"""A probe task's traffic: the REP socket every task answers pings on, the pings from each group's first task to
every task of the other groups, and the trainers' gloo (and NCCL) all-reduce."""

from __future__ import annotations

import datetime
import queue
import threading
import time

import zmq

from srl_hpc import graph as wiring
from srl_hpc.probe import COLLECTIVE_TIMEOUT, PING_BATCH, PING_TIMEOUT, PORT, error_text
from srl_hpc.streams import endpoints


class Responder(threading.Thread):
    """The task's REP socket, in a thread of its own (it owns the socket): answers every request with the
    task's worker name until stopped."""

    def __init__(self, ctx: zmq.Context, name: str) -> None:
        super().__init__(name="probe-rep", daemon=True)
        self.ctx, self.me = ctx, name
        self.stop = threading.Event()
        self.port: queue.Queue = queue.Queue()
        self.answered = 0

    def run(self) -> None:
        sock = self.ctx.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            self.port.put(endpoints.bind(sock))
        except Exception as e:  # noqa: BLE001  reported by the main thread
            self.port.put(e)
            sock.close()
            return
        while not self.stop.is_set():
            if sock.poll(100):
                sock.recv()
                sock.send_string(self.me)
                self.answered += 1
        sock.close()


def ping_all(ctx: zmq.Context, table: dict, targets: list[str], timeout: float = PING_TIMEOUT) -> dict:
    """One request to each target's REP (at most PING_BATCH in flight): {target: {"ms": round trip}} or
    {target: {"error": why}}."""
    out: dict[str, dict] = {}
    for start in range(0, len(targets), PING_BATCH):
        pending: dict[zmq.Socket, tuple[str, float]] = {}
        poller = zmq.Poller()
        for target in targets[start : start + PING_BATCH]:
            entry = table.get(target, {})
            if PORT not in entry.get("ports", {}):
                out[target] = {"error": "it has no address (its own lines say why)"}
                continue
            sock = ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoints.address(table, target, PORT))
            pending[sock] = (target, time.monotonic())
            sock.send_string(target)
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for sock, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                target, sent = pending.pop(sock)
                reply = sock.recv_string()
                out[target] = (
                    {"ms": (time.monotonic() - sent) * 1000} if reply == target else {"error": f"answered as {reply!r}"}
                )
                poller.unregister(sock)
                sock.close()
        for sock, (target, _) in pending.items():
            out[target] = {"error": f"no reply within {timeout:g} s from {endpoints.address(table, target, PORT)}"}
            sock.close()
    return out


def all_reduce(graph: wiring.Graph, name: str, table: dict, store=None) -> dict:
    """This trainer's part in its policy's gloo all-reduce (and NCCL where every trainer of the policy sees a
    GPU): ranks are the policy's trainers in order, the first serves the TCPStore (`store`, bound before the
    rendezvous). Returns {"gloo": {...}, "nccl": {...} or None}."""
    import torch
    import torch.distributed as dist

    from srl_hpc.handlers.lockstep import ddp_backend

    peers = [w.name for w in graph.trainers(graph.worker(name).policy)]
    rank, size = peers.index(name), len(peers)
    out: dict = {"peers": peers, "rank": rank, "gloo": None, "nccl": None}
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT)
    started = time.monotonic()
    try:
        if store is None:
            leader = table[peers[0]]
            if "ddp" not in leader.get("ports", {}):
                raise RuntimeError(f"{peers[0]} serves no store (its own lines say why)")
            store = dist.TCPStore(leader["host"], leader["ports"]["ddp"], None, False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        expected = size * (size + 1) / 2
        out["gloo"] = {"seconds": time.monotonic() - started, "sum": value.item(), "expected": expected}
        if value.item() != expected:
            out["gloo"]["error"] = f"the sum is {value.item():g}, not {expected:g}"
    except Exception as e:  # noqa: BLE001
        out["gloo"] = {"error": error_text(e), "seconds": time.monotonic() - started}
        return out
    try:
        gpus = [table[p].get("gpu") for p in peers]
        if all(gpus):
            out["nccl"] = nccl_all_reduce(dist, torch, table[name]["gpu_index"], rank, size, ddp_backend(gpus), gpus)
    finally:
        dist.destroy_process_group()
    return out


def nccl_all_reduce(dist, torch, index: int, rank: int, size: int, backend: str, gpus: list[str]) -> dict:
    """NCCL across the policy's trainers, each on the GPU its worker would take; where two share one GPU,
    NCCL cannot run (two ranks on one device) and the trainers' DDP falls back to gloo: said, not tried."""
    if backend != "nccl":
        return {
            "skipped": f"trainers share a GPU ({', '.join(gpus)}): NCCL refuses two ranks on one device, and "
            f"their DDP falls back to gloo"
        }
    started = time.monotonic()
    try:
        torch.cuda.set_device(index)
        group = dist.new_group(backend="nccl")
        value = torch.full((1,), float(rank + 1), device=f"cuda:{index}")
        dist.all_reduce(value, group=group)
        torch.cuda.synchronize()
        expected = size * (size + 1) / 2
        found = {"seconds": time.monotonic() - started, "sum": value.item(), "expected": expected}
        if value.item() != expected:
            found["error"] = f"the sum is {value.item():g}, not {expected:g}"
        return found
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e), "seconds": time.monotonic() - started}
