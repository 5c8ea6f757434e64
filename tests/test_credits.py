"""Flow control on the sample stream over real ZMQ sockets (loopback): a trainer's leave bounds what its actors
send, whatever their number."""

import zmq

from conftest import wait_until
from srl_hpc.streams import credits, wire
from srl_hpc.streams.credits import CreditLedger, GatedProducer


def until(condition, what, timeout=10.0):
    """Each condition here serves the ledger's socket itself: called again without a pause."""
    wait_until(condition, timeout, what, interval=0)


def loopback(sock) -> str:
    """The loopback address of a bound socket's port."""
    return "tcp://127.0.0.1:" + sock.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]


def setup(ctx, n_actors, window):
    actors = [f"actor/{i}" for i in range(n_actors)]
    ledger = CreditLedger(ctx, window, actors)
    ledger.bind()
    samples = ctx.socket(zmq.PULL)
    samples.bind_to_random_port("tcp://127.0.0.1")
    gates = {a: GatedProducer(ctx, a, [(loopback(samples), loopback(ledger.socket))]) for a in actors}
    return ledger, samples, gates


def granted(ledger, gates, key):
    """Serve the asks, then the actors that hold leave for `key` (each asks once when it has none)."""
    ledger.serve()
    return {a for a, g in gates.items() if g.reserve(key, 5)}


def test_at_most_the_window_holds_leave_and_each_segment_received_frees_one():
    ctx = zmq.Context()
    try:
        ledger, samples, gates = setup(ctx, n_actors=8, window=3)
        holders: set = set()
        until(lambda: holders.update(granted(ledger, gates, 0)) or len(holders) == 3, "three grants")
        for _ in range(20):  # however long the others ask, nobody else gets leave
            holders |= granted(ledger, gates, 0)
        assert len(holders) == 3 and ledger.outstanding == 3
        first = sorted(holders)[0]
        assert gates[first].try_send(wire.pack("segment", {"actor": first}, {}), 1000, key=0)
        msg = wire.unpack(samples.recv_multipart())
        ledger.used(msg.meta["actor"])  # the trainer received it: one more actor may go
        assert ledger.outstanding == 2
        until(lambda: holders.update(granted(ledger, gates, 0)) or len(holders) == 4, "a fourth grant")
        assert ledger.outstanding == 3
    finally:
        ctx.destroy(linger=0)


def test_a_grant_left_unused_is_taken_back_so_a_lost_actor_cannot_shrink_the_window(monkeypatch):
    ctx = zmq.Context()
    try:
        ledger, samples, gates = setup(ctx, n_actors=2, window=1)
        holders: set = set()
        until(lambda: holders.update(granted(ledger, gates, 0)) or holders, "a grant")
        (lost,) = holders  # it never sends: it died, say
        monkeypatch.setattr(credits, "GRANT_TIMEOUT", 0.0)
        other = next(a for a in gates if a != lost)
        until(lambda: other in granted(ledger, gates, 0), "the lost actor's grant to go to the other")
        assert ledger.outstanding == 1
    finally:
        ctx.destroy(linger=0)


def test_an_actor_the_controller_declares_lost_has_its_grants_taken_back_at_once():
    ctx = zmq.Context()
    try:
        ledger, samples, gates = setup(ctx, n_actors=2, window=1)
        holders: set = set()
        until(lambda: holders.update(granted(ledger, gates, 0)) or holders, "a grant")
        (lost,) = holders
        other = next(a for a in gates if a != lost)
        for _ in range(20):  # (GRANT_TIMEOUT is far off: the grant stays where it is)
            assert other not in granted(ledger, gates, 0)
        ledger.lost = frozenset({lost})  # the controller's ping
        until(lambda: other in granted(ledger, gates, 0), "the lost actor's grant to go to the other")
        assert ledger.outstanding == 1 and lost not in ledger.granted
    finally:
        ctx.destroy(linger=0)


def test_a_replaced_actors_grants_come_back_when_its_replacement_asks():
    ctx = zmq.Context()
    try:
        ledger, samples, gates = setup(ctx, n_actors=2, window=2)
        holders: set = set()
        until(lambda: holders.update(granted(ledger, gates, 0)) or len(holders) == 2, "two grants")
        # actor/1 died holding its grant, and is back
        replacement = GatedProducer(ctx, "actor/1", [(loopback(samples), loopback(ledger.socket))])
        until(lambda: ledger.serve() or replacement.reserve(0, 5), "the replacement's leave")
        assert ledger.outstanding == 2  # actor/0's grant and the replacement's; the dead one's was taken back
    finally:
        ctx.destroy(linger=0)


def test_asks_that_are_not_an_actors_want_are_counted_and_grant_nothing():
    ctx = zmq.Context()
    try:
        ledger, _, _ = setup(ctx, n_actors=1, window=4)
        stranger = ctx.socket(zmq.DEALER)
        stranger.connect(loopback(ledger.socket))
        for frames in (
            wire.pack("want", {"actor": "actor/9"}),
            wire.pack("want", {"actor": ["actor/0"]}),
            wire.pack("credit", {"actor": "actor/0"}),
            [b"not a message"],
        ):
            stranger.send_multipart(frames)
        until(lambda: ledger.serve() or ledger.malformed == 4, "the four asks to be read")
        assert ledger.outstanding == 0 and not ledger.waiting
    finally:
        ctx.destroy(linger=0)


def test_the_window_grows_while_the_trainer_waits_for_data_and_shrinks_back_to_a_queues_worth():
    """Slow envs: with a queue's worth of leave, a trainer waits while segments take seconds to fill, so it
    lets more be filled at once; once it waits no more, the window comes back down to the queue's worth."""
    ctx = zmq.Context()
    try:
        ledger, _, _ = setup(ctx, n_actors=1, window=4)
        for _ in range(3):
            ledger.trained(waited=1.0, computed=0.5)
        ledger.trained(waited=0.2, computed=0.5)
        assert ledger.window == 4 + 4 * 2  # each update it waited for: half a queue's worth more
        ledger.trained(waited=0.1, computed=0.5)  # a wait under a quarter of the update's time is not one
        assert ledger.window == 10
        for _ in range(10):
            ledger.trained(waited=0.0, computed=0.5)
        assert ledger.window == 4
        ledger.used("actor/0", fill_seconds=2.0)
        ledger.used("actor/0", fill_seconds=4.0)
        assert ledger.fill_seconds == 2.1  # a moving average of what the actors say
    finally:
        ctx.destroy(linger=0)
