"""While an actor's policy worker is away, another policy worker of the same policy answers its requests
(srl_hpc/streams/failover.py), over real ZMQ and Unix sockets; once the replacement is there, new requests go
back to it."""

import numpy as np
import pytest
import zmq

from conftest import wait_until
from srl_hpc.streams import inference, unix
from srl_hpc.streams.failover import FailoverClient
from srl_hpc.streams.inference import InferenceClient, InferenceServer, ShmInferenceClient

REPLY = (("actions", "<i8", ()),)


def answer_all(server, version):
    """Reply to every request waiting at `server` (its actions: the observations' first column, x10)."""
    served = []
    for req in server.poll_batch(max_rows=100, timeout_ms=20):
        server.reply(req, {"version": version}, {"actions": req.obs[:, 0].astype(np.int64) * 10})
        served.append(req)
    return served


def wait_reply(client, group, servers):
    """Wait for group's reply while every server answers what reaches it (bounded)."""
    for _ in range(100):
        for server, version in servers:
            answer_all(server, version)
        reply = client.wait(group, 20)
        if reply is not None:
            return reply
    raise AssertionError(f"no reply for group {group}")


@pytest.mark.parametrize("transport", ["zmq", "shm"])
def test_a_lost_policy_workers_requests_go_to_another_and_come_back_to_its_replacement(tmp_path, transport):
    ctx = zmq.Context()
    path = unix.socket_path(tmp_path, "policy/0")
    first, port = InferenceServer.bind(ctx, local_path=path)
    other_server, other_port = InferenceServer.bind(ctx)
    if transport == "zmq":
        primary = InferenceClient(inference.connect(ctx, f"tcp://127.0.0.1:{port}"))
    else:
        primary = ShmInferenceClient(path, 2, 2, (1,), np.float32, REPLY)
    client = FailoverClient(primary, lambda: InferenceClient(inference.connect(ctx, f"tcp://127.0.0.1:{other_port}")))
    replacement = None
    try:
        client.send(0, np.full((2, 1), 1, np.float32), {"epsilon": 0.1})
        assert wait_reply(client, 0, [(first, 1)]).meta["version"] == 1 and client.other is None
        client.send(0, np.full((2, 1), 2, np.float32), {"epsilon": 0.1})
        (held,) = wait_pending(first)
        assert held.obs.tolist() == [[2.0], [2.0]]
        first.close()
        first.socket.close(linger=0)  # gone, holding group 0's request
        reply = wait_reply(client, 0, [(other_server, 7)])
        assert reply.meta["version"] == 7 and reply.arrays["actions"].tolist() == [20, 20]
        client.send(1, np.full((2, 1), 3, np.float32))  # while it is still away: to the other one too
        assert wait_reply(client, 1, [(other_server, 7)]).arrays["actions"].tolist() == [30, 30]
        replacement, _ = InferenceServer.bind(ctx, local_path=path, port=port)
        wait_until(lambda: not client.primary.is_lost(), 5, "the client to see the replacement", interval=0.02)
        client.send(0, np.full((2, 1), 4, np.float32))
        reply = wait_reply(client, 0, [(replacement, 9), (other_server, 7)])
        assert reply.meta["version"] == 9 and reply.arrays["actions"].tolist() == [40, 40]
        assert client.resent == 0 and client.rerouted == 1  # only the request the lost one held was sent twice
    finally:
        client.close()
        for server in (replacement, other_server):
            if server is not None:
                server.close()
        ctx.destroy(linger=0)


def wait_pending(server):
    for _ in range(100):
        batch = server.poll_batch(max_rows=100, timeout_ms=20)
        if batch:
            return batch
    raise AssertionError("no request arrived")
