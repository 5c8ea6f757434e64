"""The controller's bookkeeping when a worker that receives frames is replaced: what its predecessor held is
counted once as lost, and the stop stops waiting for frames that can no longer arrive; a replaced controller goes
on from what its predecessor saved; silent actors are gone without while enough remain."""

import json
import time
from types import SimpleNamespace

from srl_hpc.config.schema import StopConfig
from srl_hpc.handlers import controller
from srl_hpc.handlers.run_totals import RunTotals
from srl_hpc.handlers.stop_rules import StopRules

BEFORE = {"wall_time": 0.0, "env_frames": 0, "episodes": 0}


def test_a_replaced_trainers_held_frames_are_lost_once_and_its_replacements_counters_add_to_them():
    totals = RunTotals(graph=None, policies=[""], return_window=10, before=BEFORE)
    totals.report("trainer/0", {"frames_received": 1000, "frames_consumed": 640, "frames_dropped": 64}, final=False)
    totals.restarting("trainer/0", "was killed by SIGKILL")
    totals.report(
        "trainer/0",
        {"incarnation": 1, "frames_received": 500, "frames_consumed": 448, "frames_dropped": 52},
        final=True,
    )
    assert totals.frames_lost_with_replaced == 1000 - 640 - 64
    assert totals.sum("frames_received") == 1500 and totals.sum("frames_consumed") == 1088
    assert totals.sum("frames_consumed") + totals.sum("frames_dropped") + totals.frames_lost_with_replaced == 1500
    totals.report("actor/0", {"frames_sent": 900}, final=False)  # an actor's replacement loses no received frames
    totals.report("actor/0", {"incarnation": 1, "frames_sent": 10}, final=False)
    assert totals.frames_lost_with_replaced == 296


def test_what_a_sender_without_a_final_report_sent_is_what_arrived_from_it():
    totals = RunTotals(graph=None, policies=[""], return_window=10, before=BEFORE)
    totals.report("actor/0", {"frames_sent": 300}, final=False)  # then killed, having sent 400 in all
    totals.restarting("actor/0", "was killed by SIGKILL")
    totals.report("actor/0", {"incarnation": 1, "frames_sent": 200}, final=True)
    totals.report("actor/1", {"frames_sent": 500}, final=True)
    totals.report("actor/2", {"frames_sent": 100}, final=False)  # lost with its host: no final report
    totals.report("trainer/1", {"frames_received": 30, "received_from": {"actor/3#0": 30}}, final=False)
    totals.restarting("trainer/1", "was killed by SIGKILL")  # actor/3 never reported at all
    totals.report("trainer/1", {"incarnation": 1, "frames_received": 0, "received_from": {}}, final=True)
    arrived = {"actor/0#0": 400, "actor/0#1": 200, "actor/1#0": 480, "actor/2#0": 120}
    totals.report("trainer/0", {"frames_received": 1200, "received_from": arrived}, final=False)
    assert totals.frames_awaited() == 20  # actor/1's last frames, still in flight
    totals.report("trainer/0", {"frames_received": 1220, "received_from": {**arrived, "actor/1#0": 500}}, final=True)
    assert totals.frames_awaited() == 0
    sent, at_receivers = totals.frames_sent()
    assert sent == 400 + 200 + 500 + 120 + 30 == totals.sum("frames_received")
    assert at_receivers == 400 + 120 + 30


def test_with_a_replaced_drainer_the_stop_waits_until_frames_stop_arriving_not_for_all_that_were_sent(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(controller, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    received = [90]
    watches = {replaced: controller.ArrivalWatch(lambda: 100 - received[0], replaced) for replaced in (False, True)}
    clock[0], received[0] = 0.5, 95  # still arriving
    assert not any(w.all() for w in watches.values())
    clock[0] = 0.5 + controller.QUIET * 0.9
    assert not any(w.all() for w in watches.values())
    clock[0] = 0.5 + controller.QUIET * 1.1  # nothing more for QUIET seconds: the rest went with the old trainer
    assert watches[True].all() and not watches[False].all()
    received[0] = 100
    assert watches[False].all()  # without a replacement, only everything sent ends the wait


def test_a_replacement_controller_goes_on_from_the_saved_totals_through_json():
    totals = RunTotals(graph=None, policies=["a", "b"], return_window=3, before=BEFORE)
    totals.start(["actor/0", "trainer/0"])
    totals.report("actor/0", {"frames_sent": 700, "returns": [[10.0, 10], [20.0, 20]]}, final=False)
    totals.report("actor/0", {"policy_returns": [[1, 5.0, 5]], "frames_sent": 800}, final=False)
    totals.restarting("trainer/0", "was killed by SIGKILL")
    totals.report(
        "trainer/0", {"frames_received": 600, "frames_consumed": 512, "received_from": {"actor/0#0": 600}}, final=False
    )
    totals.report("trainer/0", {"incarnation": 1, "frames_received": 100, "frames_consumed": 64}, final=False)
    now = time.monotonic()
    saved = json.loads(json.dumps(totals.state(now)))  # as RUN/controller.json holds it

    later = RunTotals(graph=None, policies=["a", "b"], return_window=3, before=BEFORE)
    later.start(["actor/0", "trainer/0"])
    later.restore(saved, now + 100.0)  # (its own clock: another process's)
    assert later.elapsed(now + 100.0) >= totals.elapsed(now)  # the time it was away counts
    for key in ("frames_sent", "frames_received", "frames_consumed"):
        assert later.sum(key) == totals.sum(key)
    assert later.frames_sent() == totals.frames_sent() and later.received_from() == totals.received_from()
    assert later.frames_lost_with_replaced == totals.frames_lost_with_replaced == 600 - 512
    assert later.episodes == totals.episodes == 3 and later.mean_return() == totals.mean_return() == 15.0
    assert later.policy_scores() == totals.policy_scores()
    assert later.restarts == totals.restarts
    # a report after the restore adds up as before it: cumulative counters replace the saved ones
    later.report("trainer/0", {"incarnation": 1, "frames_received": 150, "frames_consumed": 128}, final=False)
    assert later.sum("frames_received") == 750 and later.frames_lost_with_replaced == 88


def test_silent_actors_are_lost_while_the_share_left_allows_and_then_the_run_fails():
    workers = ["trainer/0", *(f"actor/{i}" for i in range(4))]
    totals = RunTotals(graph=None, policies=[""], return_window=10, before=BEFORE)
    totals.start(workers)
    rules = StopRules(StopConfig(target_return=None), silence_limit=10.0, actors=4, min_alive=0.5)
    now = time.monotonic()
    for worker in workers:
        totals.last_seen[worker] = now
    totals.last_seen["actor/3"] = now - 11
    assert rules.decide(totals, now) is None and list(totals.lost) == ["actor/3"]
    assert "actor/3" in totals.finals and "actor/3" not in totals.last_seen  # not waited for, not judged again
    totals.last_seen["actor/2"] = now - 11
    assert rules.decide(totals, now) is None and sorted(totals.lost) == ["actor/2", "actor/3"]  # 2 of 4 left
    totals.last_seen["actor/1"] = now - 11  # one more would leave less than half
    assert rules.decide(totals, now) == ("failed", "worker actor/1 failed: " + totals.failed["actor/1"])
    assert totals.back("actor/3") and "actor/3" not in totals.finals  # it reports again: waited for again
    totals.last_seen["trainer/0"] = now - 11  # never lost: the run cannot go on without it
    assert not rules.may_lose(totals, "trainer/0")
