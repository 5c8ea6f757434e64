"""How the launcher reads Slurm's answers and how often it asks (pure parts; the real squeue is in test_slurm)."""
from launcher import slurm


def test_het_components_count_for_their_job_and_array_tasks_for_themselves():
    squeue = "123+0|RUNNING\n123+1|RUNNING\n123+2|FAILED\n200_0|COMPLETED\n200_1|PENDING\n999|RUNNING\n"
    raw = slurm.parse_states(squeue, ["123", "200_0", "200_1", "300"])
    assert raw == {"123": ["RUNNING", "RUNNING", "FAILED"], "200_0": ["COMPLETED"], "200_1": ["PENDING"]}
    assert slurm.combine(raw["123"]) == ("failed", "FAILED")  # one failed component fails the het job
    assert slurm.combine(raw.get("300", [])) == ("unknown", "UNKNOWN")


def test_sacct_states_with_who_cancelled_and_requeue_marks():
    raw = slurm.parse_states("55|CANCELLED by 0\n56|COMPLETED\n57|RUNNING+\n", ["55", "56", "57"])
    assert [slurm.combine(raw[i])[0] for i in ("55", "56", "57")] == ["cancelled", "completed", "running"]


def test_a_watched_job_is_asked_about_less_and_less_often_until_it_is_about_to_end(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(slurm.time, "monotonic", lambda: now[0])
    ask = slurm.Polite(first=1.0, most=15.0)
    asked = []
    while now[0] < 120:  # a follower that wakes every half second for two minutes
        if ask.due():
            asked.append(now[0])
        now[0] += 0.5
    assert asked[:6] == [0.0, 1.0, 3.0, 7.0, 15.0, 30.0]
    assert all(b - a == 15.0 for a, b in zip(asked[5:], asked[6:]))
    assert len(asked) == 11  # not the 240 of asking at every wake-up
    asked.clear()
    for _ in range(10):  # the run wrote its summary: every second again
        if ask.due(hurry=True):
            asked.append(now[0])
        now[0] += 0.5
    assert asked == [120.0, 121.0, 122.0, 123.0, 124.0]
