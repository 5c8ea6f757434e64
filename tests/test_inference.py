"""Dynamic batching over real ZMQ sockets: several actors' requests, one batch, each reply to its sender."""

import json

import gymnasium
import numpy as np
import pytest
import zmq

from srl_hpc.streams import inference, unix, wire
from srl_hpc.streams.inference import InferenceClient, InferenceServer, ShmInferenceClient
from srl_hpc.streams.shm import remove_segment, shm_name

PPO_REPLY = (("actions", "<i8", ()), ("logp", "<f4", ()), ("values", "<f4", ()))  # a Discrete task's


@pytest.fixture
def stream():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = InferenceServer(router)
    clients = []
    for _ in range(3):
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        clients.append(InferenceClient(dealer))
    yield server, clients
    ctx.destroy(linger=0)


def wait_pending(server, n_requests):
    """Poll until n requests sit in the server's socket (bounded), without consuming them."""
    seen = []
    for _ in range(200):
        batch = server.poll_batch(max_rows=10_000, timeout_ms=50)
        seen += batch
        if len(seen) >= n_requests:
            return seen
    raise AssertionError(f"only {len(seen)} of {n_requests} requests arrived")


def test_requests_from_several_clients_are_batched_and_answered_to_the_right_client(stream):
    server, clients = stream
    for i, c in enumerate(clients):
        c.send(group=i, obs=np.full((2, 3), i, np.float32))
    batch = wait_pending(server, 3)
    assert sorted(int(r.obs[0, 0]) for r in batch) == [0, 1, 2]
    for req in batch:
        server.reply(req, {"version": 7}, {"actions": req.obs[:, 0].astype(np.int64) * 10})
    for i, c in enumerate(clients):
        reply = c.wait(group=i, timeout_ms=2000)
        assert reply is not None and reply.meta == {"group": i, "version": 7}
        assert reply.arrays["actions"].tolist() == [10 * i, 10 * i]


def test_batch_takes_everything_pending_in_one_call():
    """inproc delivers on send, so all three requests are pending when the server polls once."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://batching")
    server = InferenceServer(router)
    clients = []
    for i in range(3):
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect("inproc://batching")
        clients.append(InferenceClient(dealer))
        clients[-1].send(group=0, obs=np.full((4, 1), i, np.float32))
    batch = server.poll_batch(max_rows=100, timeout_ms=1000)
    assert len(batch) == 3 and sum(len(r.obs) for r in batch) == 12
    ctx.destroy(linger=0)


def test_max_batch_caps_rows_and_keeps_the_rest_in_order(stream):
    server, clients = stream
    for i, c in enumerate(clients):
        c.send(group=0, obs=np.full((4, 2), i, np.float32))
    first = server.poll_batch(max_rows=8, timeout_ms=2000)
    for _ in range(10):  # a poll may return before every request has arrived
        if sum(len(r.obs) for r in first) == 8:
            break
        first += server.poll_batch(max_rows=8 - sum(len(r.obs) for r in first), timeout_ms=2000)
    assert sum(len(r.obs) for r in first) == 8 and len(first) == 2
    rest = server.poll_batch(max_rows=8, timeout_ms=2000)
    assert len(rest) == 1
    assert {int(r.obs[0, 0]) for r in first + rest} == {0, 1, 2}


def test_an_oversized_request_is_served_alone(stream):
    server, clients = stream
    clients[0].send(group=0, obs=np.zeros((50, 1), np.float32))
    batch = server.poll_batch(max_rows=8, timeout_ms=2000)
    assert len(batch) == 1 and len(batch[0].obs) == 50


def test_no_request_returns_empty_after_timeout(stream):
    server, _ = stream
    assert server.poll_batch(max_rows=8, timeout_ms=20) == []


def test_client_buffers_replies_of_other_groups(stream):
    server, clients = stream
    c = clients[0]
    c.send(0, np.zeros((1, 1), np.float32))
    c.send(1, np.ones((1, 1), np.float32))
    reqs = wait_pending(server, 2)
    for req in reversed(reqs):  # answer group 1 first
        server.reply(req, {}, {"x": req.obs})
    assert c.wait(0, 2000).arrays["x"][0, 0] == 0.0
    assert c.wait(1, 2000).arrays["x"][0, 0] == 1.0


@pytest.fixture
def shm_stream(tmp_path):
    """A server with a same-node listener, its ZMQ port unused."""
    ctx = zmq.Context()
    path = unix.socket_path(tmp_path, "policy/0")
    server, _ = InferenceServer.bind(ctx, local_path=path)
    yield server, path
    server.close()
    ctx.destroy(linger=0)


def serve(server, n):
    reqs = []
    for _ in range(20):
        if len(reqs) == n:
            return reqs
        reqs += server.poll_batch(max_rows=100, timeout_ms=2000)
    raise AssertionError(f"only {len(reqs)} of {n} requests arrived")


def test_shared_memory_transport_round_trip(shm_stream):
    """Observations and replies travel through the actor's shared memory; a Unix socket carries only headers."""
    server, path = shm_stream
    client = ShmInferenceClient(
        path, n_groups=2, max_rows=4, obs_shape=(4, 84, 84), obs_dtype=np.uint8, reply_fields=PPO_REPLY
    )
    try:
        for round_ in range(3):  # the same header bytes each round: parsed once, the slots' new contents read
            obs = [np.full((3, 4, 84, 84), g + 1 + 10 * round_, np.uint8) for g in range(2)]
            for g in range(2):
                client.send(g, obs[g])
            for req in serve(server, 2):
                g = req.meta["group"]
                assert req.shm is not None and np.array_equal(req.obs, obs[g])
                server.reply(
                    req,
                    {"version": 5 + round_},
                    {
                        "actions": np.arange(3) + 10 * g + round_,
                        "logp": np.full(3, -0.5, np.float32),
                        "values": np.full(3, g, np.float32),
                    },
                )
            for g in (1, 0):
                reply = client.wait(g, 2000)
                assert reply.meta == {"group": g, "version": 5 + round_}
                assert reply.arrays["actions"].tolist() == [10 * g + round_ + i for i in range(3)]
                assert reply.arrays["values"].tolist() == [g] * 3
        with pytest.raises(ValueError, match="does not fit"):
            client.send(0, np.zeros((5, 4, 84, 84), np.uint8))
    finally:
        client.close()


def test_same_node_clients_each_get_their_own_replies_and_one_that_leaves_is_forgotten(shm_stream):
    server, path = shm_stream
    clients = [
        ShmInferenceClient(
            path, n_groups=1, max_rows=2, obs_shape=(1,), obs_dtype=np.float32, reply_fields=(("actions", "<i8", ()),)
        )
        for _ in range(3)
    ]
    for i, c in enumerate(clients):
        c.send(0, np.full((2, 1), i, np.float32))
    for req in serve(server, 3):
        server.reply(req, {"version": 1}, {"actions": req.obs[:, 0].astype(np.int64) * 10})
    for i, c in enumerate(clients):
        assert c.wait(0, 2000).arrays["actions"].tolist() == [10 * i, 10 * i]
    clients[0].send(0, np.zeros((2, 1), np.float32))
    (req,) = serve(server, 1)
    clients[0].close()  # gone before its reply
    server.reply(req, {"version": 1}, {"actions": np.zeros(2, np.int64)})  # nobody to take it: not an error
    assert server.poll_batch(max_rows=100, timeout_ms=50) == [] and len(server.local.conns) == 2
    clients[1].send(0, np.full((2, 1), np.nan, np.float32))  # refused, counted, and the others go on
    clients[2].send(0, np.ones((2, 1), np.float32))
    (req,) = serve(server, 1)
    assert req.obs.tolist() == [[1.0], [1.0]] and server.malformed == 1
    for c in clients[1:]:
        c.close()


def test_a_request_lost_with_its_server_goes_again_to_the_replacement_and_a_repeated_reply_is_taken_once():
    """The server dies holding the request; a new one binds the same port; the client sends it again."""
    ctx = zmq.Context()
    try:
        first, port = InferenceServer.bind(ctx)
        client = InferenceClient(inference.connect(ctx, f"tcp://127.0.0.1:{port}"))
        client.send(0, np.full((2, 3), 7, np.float32), {"epsilon": 0.5})
        (lost,) = wait_pending(first, 1)
        first.socket.close(linger=0)  # dies with it, unanswered
        assert client.wait(0, 300) is None
        second, _ = InferenceServer.bind(ctx, port=port)
        reply = None
        for _ in range(50):  # the client notices the loss while it waits, and sends again
            reply = client.wait(0, 100)
            if reply is None and second.held() == 0:
                batch = second.poll_batch(max_rows=100, timeout_ms=0)
                for req in batch:
                    assert req.obs.tolist() == lost.obs.tolist() and req.meta == lost.meta
                    second.reply(req, {"version": 3}, {"actions": np.arange(2)})
                    second.reply(req, {"version": 3}, {"actions": np.arange(2) + 5})  # answered twice
            if reply is not None:
                break
        assert reply is not None and reply.meta == {"group": 0, "epsilon": 0.5, "version": 3}
        assert reply.arrays["actions"].tolist() == [0, 1] and client.resent == 1
        client.send(0, np.zeros((2, 3), np.float32))
        (req,) = wait_pending(second, 1)
        second.reply(req, {"version": 4}, {"actions": np.arange(2) + 10})
        assert client.wait(0, 2000).arrays["actions"].tolist() == [10, 11]  # not the repeated old reply
    finally:
        ctx.destroy(linger=0)


def test_a_same_node_client_connects_to_its_servers_replacement_and_sends_its_request_again(tmp_path):
    ctx = zmq.Context()
    path = unix.socket_path(tmp_path, "policy/0")
    first, _ = InferenceServer.bind(ctx, local_path=path)
    client = ShmInferenceClient(path, 2, 2, (1,), np.float32, (("actions", "<i8", ()),))
    second = None
    try:
        client.send(0, np.full((2, 1), 4, np.float32))
        client.send(1, np.full((2, 1), 5, np.float32))
        for req in serve(first, 2):
            if req.meta["group"] == 1:
                first.reply(req, {"version": 1}, {"actions": np.ones(2, np.int64)})
        first.close()  # dies holding group 0's request
        assert client.wait(1, 2000).arrays["actions"].tolist() == [1, 1]  # answered before: not sent again
        assert client.wait(0, 200) is None
        second, _ = InferenceServer.bind(ctx, local_path=path)
        assert client.wait(0, 200) is None  # connects again and sends group 0's request
        (req,) = serve(second, 1)
        assert req.meta["group"] == 0 and req.obs.tolist() == [[4.0], [4.0]]
        second.reply(req, {"version": 2}, {"actions": np.full(2, 9, np.int64)})
        reply = client.wait(0, 2000)
        assert reply.meta == {"group": 0, "version": 2} and reply.arrays["actions"].tolist() == [9, 9]
        assert client.resent == 1
    finally:
        client.close()
        if second is not None:
            second.close()
        ctx.destroy(linger=0)


def test_the_same_node_socket_directory_must_be_private(tmp_path):
    path = unix.socket_dir(tmp_path)
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    try:
        with pytest.raises(PermissionError, match="not a directory private to this user"):
            unix.Listener(unix.socket_path(tmp_path, "policy/0"))
    finally:
        path.rmdir()


def test_a_client_without_a_server_says_where_it_looked(tmp_path):
    with pytest.raises(ConnectionError, match="no inference server listens at .*policy-3"):
        ShmInferenceClient(
            unix.socket_path(tmp_path, "policy/3"),
            n_groups=1,
            max_rows=2,
            obs_shape=(4,),
            obs_dtype=np.float32,
            reply_fields=PPO_REPLY,
        )


def test_a_replaced_actor_starts_while_its_server_is_away_and_is_answered_once_a_server_listens(tmp_path):
    ctx = zmq.Context()
    path = unix.socket_path(tmp_path, "policy/0")
    client = ShmInferenceClient(path, 1, 2, (1,), np.float32, (("actions", "<i8", ()),), server_may_be_away=True)
    server = None
    try:
        assert client.is_lost()
        client.send(0, np.full((2, 1), 3, np.float32))  # kept until someone listens
        assert client.wait(0, 100) is None
        server, _ = InferenceServer.bind(ctx, local_path=path)
        reply = None
        for _ in range(100):
            for req in server.poll_batch(max_rows=100, timeout_ms=10):
                server.reply(req, {"version": 1}, {"actions": req.obs[:, 0].astype(np.int64)})
            if (reply := client.wait(0, 20)) is not None:
                break
        assert reply is not None and reply.arrays["actions"].tolist() == [3, 3] and client.resent == 1
    finally:
        client.close()
        if server is not None:
            server.close()
        ctx.destroy(linger=0)


def test_a_leftover_segment_is_removed_by_name(tmp_path, shm_stream):
    _, path = shm_stream
    name = shm_name(tmp_path, "actor/7")
    client = ShmInferenceClient(
        path, n_groups=1, max_rows=2, obs_shape=(4,), obs_dtype=np.float32, reply_fields=PPO_REPLY, name=name
    )
    client.conn.close()
    assert remove_segment(name) is True  # as if its actor had been killed before closing it
    assert remove_segment(name) is False


@pytest.mark.parametrize("bf16", [False, True])
def test_engine_samples_valid_actions_with_their_log_probs_and_loads_published_weights(bf16):
    import torch

    from srl_hpc.algorithms import ppo
    from srl_hpc.handlers.policy import InferenceEngine
    from srl_hpc.models.distributions import ActionDistribution
    from srl_hpc.models.heads import ActorCritic
    from srl_hpc.models.torsos import MLP
    from srl_hpc.models.weights import load_arrays, state_arrays

    four = ActionDistribution(gymnasium.spaces.Discrete(4))
    trained = ActorCritic(MLP(3, (16,)), four)
    engine = InferenceEngine(ActorCritic(MLP(3, (16,)), four), ppo.act, torch.device("cpu"), seed=0, bf16=bf16)
    load_arrays(engine.model, state_arrays(trained))  # fp32 weights, as the trainer publishes them
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16 if bf16 else torch.float32}  # still
    obs = np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32)
    out = engine.infer(obs, {})
    assert out["actions"].shape == (256,) and set(out["actions"].tolist()) <= {0, 1, 2, 3}
    assert out["logp"].dtype == out["values"].dtype == np.float32
    with torch.no_grad():
        logits, values = trained(torch.from_numpy(obs))
    expected = logits.log_softmax(-1).gather(1, torch.from_numpy(out["actions"])[:, None]).squeeze(1)
    tol = 3e-2 if bf16 else 1e-5  # bf16 keeps 8 bits of mantissa
    assert np.allclose(out["logp"], expected.numpy(), atol=tol) and np.allclose(out["values"], values.numpy(), atol=tol)


def test_ppo_samples_each_action_as_often_as_its_probability_and_never_one_of_probability_zero():
    import torch

    from srl_hpc.algorithms import ppo
    from srl_hpc.models.distributions import ActionDistribution

    probs = torch.tensor([0.1, 0.6, 0.3, 0.0])
    model = lambda obs: (probs.log().expand(len(obs), 4), torch.zeros(len(obs)))  # noqa: E731
    model.action_dist = ActionDistribution(gymnasium.spaces.Discrete(4))
    out = ppo.act(model, torch.zeros(100_000, 1), {}, torch.Generator().manual_seed(0))
    counts = np.bincount(out["actions"].numpy(), minlength=4) / 100_000
    assert np.abs(counts - probs.numpy()).max() < 0.01 and counts[3] == 0  # (3 sd of a share is 0.005)
    assert torch.allclose(out["logp"], probs.log()[out["actions"]])


@pytest.mark.slow
def test_fuzzed_same_node_headers_are_dropped_and_counted_and_the_actor_after_them_is_served(shm_stream, tmp_path):
    from fuzz_messages import JSON, Port, defects, draw, not_a_count, not_in
    from hypothesis import strategies as st

    server, path = shm_stream
    server.obs_shape = (4,)
    client = ShmInferenceClient(
        path,
        n_groups=1,
        max_rows=2,
        obs_shape=(4,),
        obs_dtype=np.float32,
        reply_fields=PPO_REPLY,
        name=shm_name(tmp_path, "actor/0"),
    )
    client.send(0, np.ones((2, 4), np.float32))
    (header,) = client._headers.values()
    (req,) = serve(server, 1)
    server.reply(
        req,
        {"version": 0},
        {"actions": np.zeros(2, np.int64), "logp": np.zeros(2, np.float32), "values": np.zeros(2, np.float32)},
    )
    assert client.wait(0, 2000) is not None
    meta = json.loads(header)["m"]
    port = Port(
        wire.Message("infer", meta),
        {
            "group": not_a_count(),
            "shm": not_in([meta["shm"]]),
            "rows": st.one_of(not_a_count(), st.just(0)),
            "obs": JSON.filter(lambda v: not (isinstance(v, list) and len(v) == 3)),  # (any 3-list may be a slot)
            "reply": JSON.filter(lambda v: not isinstance(v, dict)),
        },
    )
    # a same-node request is one frame, the header (defects in further frames do not apply), and never empty
    # (an empty message reads as the connection's end)
    fuzzed = [
        bytes(m[0])
        for batch in draw(st.lists(defects(port), min_size=50, max_size=50), 10)
        for m in batch
        if len(m) == 1 and len(m[0])
    ]
    assert len(fuzzed) > 200
    fuzzer, served = unix.Connection(path), []
    for start in range(0, len(fuzzed), 50):  # as much as a connection's buffer surely holds, then read
        for data in fuzzed[start : start + 50]:
            fuzzer.send(data)
        for _ in range(50):
            if server.malformed == min(start + 50, len(fuzzed)):
                break
            served += server.poll_batch(max_rows=100, timeout_ms=100)
    client.send(0, np.full((2, 4), 3.0, np.float32))
    served += serve(server, 1)
    assert server.malformed == len(fuzzed) and len(served) == 1 and served[0].obs.tolist() == [[3.0] * 4] * 2
    fuzzer.close()
    client.close()


def test_self_play_requests_name_a_version_per_row_and_a_malformed_list_is_dropped(stream, shm_stream):
    """Both transports carry `opponents`, one version per row; a list of another length, or one that is not
    versions, is dropped and counted, and the requests after it are served."""
    server, clients = stream
    for bad in ([0, 1], [0, "x", 2], 5):
        clients[0].send(0, np.zeros((3, 2), np.float32), {"opponents": bad})
    clients[1].send(1, np.zeros((3, 2), np.float32), {"opponents": (-1, 4, 4)})
    (req,) = wait_pending(server, 1)
    assert req.meta["opponents"] == [-1, 4, 4] and server.malformed == 3
    shm_server, path = shm_stream
    client = ShmInferenceClient(
        path, n_groups=1, max_rows=4, obs_shape=(2,), obs_dtype=np.float32, reply_fields=PPO_REPLY
    )
    try:
        client.send(0, np.zeros((2, 2), np.float32), {"opponents": (-1, 2, 3)})
        client.send(0, np.zeros((2, 2), np.float32), {"opponents": (7, -1)})
        (req,) = serve(shm_server, 1)
        assert req.meta["opponents"] == [7, -1] and shm_server.malformed == 1
    finally:
        client.close()
