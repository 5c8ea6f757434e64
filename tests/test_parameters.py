"""Parameter service over real ZMQ PUB/SUB: versions, tags, late subscribers, the inline subscriber."""

import numpy as np
import zmq

from conftest import wait_until
from srl_hpc.services import parameters
from srl_hpc.services.parameters import InlineSubscriber, ParameterPublisher, ParameterSubscriber
from srl_hpc.streams import wire


def poll_until(subscriber, version, timeout=5.0):
    def arrived():
        msg = subscriber.poll_newest()
        return msg if msg is not None and msg.meta["version"] == version else None

    return wait_until(arrived, timeout, f"version {version}", interval=0.01)


def test_subscribers_follow_their_tag_and_keep_only_the_newest(monkeypatch):
    monkeypatch.setattr(parameters, "REPUBLISH_INTERVAL", 0.05)
    ctx = zmq.Context()
    try:
        pub = ctx.socket(zmq.XPUB)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        publisher = ParameterPublisher(pub)
        subs = {}
        for tag in ("latest", "best"):
            sock = ctx.socket(zmq.SUB)
            sock.connect(f"tcp://127.0.0.1:{port}")
            subs[tag] = ParameterSubscriber(sock, tag)
        publisher.publish(1, {"w": np.ones(3, np.float32)})
        publisher.publish(2, {"w": np.full(3, 2, np.float32)}, tags=("latest", "best"))
        publisher.publish(3, {"w": np.full(3, 3, np.float32)})

        def caught_up():
            publisher.maybe_republish()  # the first sends may precede the subscriptions (late joiners)
            for sub in subs.values():
                sub.poll_newest()
            return subs["latest"].version == 3 and subs["best"].version == 2

        wait_until(
            caught_up,
            5,
            "versions 3 under latest and 2 under best",
            lambda: {tag: sub.version for tag, sub in subs.items()},
            interval=0.01,
        )
        publisher.publish(4, {"w": np.full(3, 4, np.float32)})
        publisher.publish(5, {"w": np.full(3, 5, np.float32)})
        assert poll_until(subs["latest"], 5).arrays["w"].tolist() == [5, 5, 5]  # 4 was skipped, not applied
        assert subs["best"].poll_newest() is None  # nothing new under "best"
    finally:
        ctx.destroy(linger=0)


def test_the_inline_subscriber_reads_the_publishers_last_message():
    ctx = zmq.Context()
    try:
        publisher = ParameterPublisher(ctx.socket(zmq.XPUB))
        inline = InlineSubscriber(publisher)
        assert inline.poll_newest() is None
        publisher.publish(7, {"w": np.zeros(2, np.float32)})
        assert inline.poll_newest().meta["version"] == 7
        assert inline.poll_newest() is None  # nothing newer
    finally:
        ctx.destroy(linger=0)


def test_the_publisher_counts_one_copy_per_subscriber_of_the_tag():
    ctx = zmq.Context()
    try:
        pub = ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.XPUB_VERBOSER, 1)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        publisher = ParameterPublisher(pub)
        subs = [
            ParameterSubscriber.connect(ctx, f"tcp://127.0.0.1:{port}", tag) for tag in ("latest", "latest", "best")
        ]
        # each subscription comes over its own connection, in no set order: wait for all three
        wait_until(
            lambda: publisher.subscribers_of("latest") >= 2 and publisher.subscribers_of("best") >= 1,
            5,
            "two subscribers of latest and one of best",
            interval=0.01,
        )
        assert publisher.subscribers_of("latest") == 2 and publisher.subscribers_of("best") == 1
        arrays = {"w": np.ones(1000, np.float32)}

        def size(version, tag):  # one message as sent: the tag frame, then the packed weights
            return len(tag) + sum(len(f) for f in wire.pack("params", {"version": version, "tag": tag}, arrays))

        publisher.publish(1, arrays)
        assert publisher.bytes_sent == 2 * size(1, "latest")  # one copy to each "latest" subscriber
        publisher.publish(2, arrays, tags=("latest", "best"))
        assert publisher.bytes_sent == 2 * size(1, "latest") + 2 * size(2, "latest") + size(2, "best")
        assert publisher.versions_sent == 2
        subs[0].socket.close(linger=0)  # a subscriber that leaves is not counted any more
        wait_until(
            lambda: publisher.subscribers_of("latest") <= 1,
            5,
            "the closed subscriber to leave",
            lambda: f"{publisher.subscribers_of('latest')} subscribers of latest",
            interval=0.01,
        )
        assert publisher.subscribers_of("latest") == 1
    finally:
        ctx.destroy(linger=0)
