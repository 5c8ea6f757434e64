"""The controller's bookkeeping when a worker that receives frames is replaced: what its predecessor held is
counted once as lost, and the stop stops waiting for frames that can no longer arrive."""

from types import SimpleNamespace

from srl_hpc.handlers import controller
from srl_hpc.handlers.run_totals import RunTotals

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


def test_with_a_replaced_drainer_the_stop_waits_until_frames_stop_arriving_not_for_all_that_were_sent(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(controller, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    received = [90]
    watches = {replaced: controller.ArrivalWatch(lambda: received[0], 100, replaced) for replaced in (False, True)}
    clock[0], received[0] = 0.5, 95  # still arriving
    assert not any(w.all() for w in watches.values())
    clock[0] = 0.5 + controller.QUIET * 0.9
    assert not any(w.all() for w in watches.values())
    clock[0] = 0.5 + controller.QUIET * 1.1  # nothing more for QUIET seconds: the rest went with the old trainer
    assert watches[True].all() and not watches[False].all()
    received[0] = 100
    assert watches[False].all()  # without a replacement, only everything sent ends the wait
