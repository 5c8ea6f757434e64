"""Population-based training: who copies whom (pure), what the config refuses, the graph of members, and a
real population run in which copies happen (weights copied, hyper-parameters changed, lineage recorded)."""

import json
import subprocess

import h5py
import numpy as np
import pytest

from conftest import ROOT, assert_every_frame_accounted_for, run_local, script
from srl_hpc import config, graph
from srl_hpc.config.loader import ConfigError, with_overrides
from srl_hpc.population.pbt import Population, starting_values

EXPERIMENT = ROOT / "experiments" / "cartpole_pbt.yaml"


def population(*overrides):
    exp = with_overrides(config.load(EXPERIMENT), list(overrides))
    return exp, Population(exp.population, exp.algorithm, exp.stop.return_window, np.random.default_rng(0))


def test_members_start_from_their_own_values_and_the_worst_copies_the_best_with_a_factor_applied():
    exp, pop = population("population.fraction=0.25")
    assert [pop.values[m]["lr"] for m in pop.members] == [1e-4, 3e-4, 1e-3, 3e-3]
    assert starting_values(exp.population, exp.algorithm, "member-2") == {"lr": 1e-3}
    window = exp.stop.return_window
    scores = {
        "member-0": (30.0, window),
        "member-1": (200.0, window),
        "member-2": (480.0, window),
        "member-3": (90.0, window),
    }
    (copy,) = pop.round(12.0, scores)
    assert (copy.round, copy.target, copy.source) == (1, "member-0", "member-2")
    assert copy.previous == {"lr": 1e-4} and copy.values["lr"] in (pytest.approx(8e-4), pytest.approx(1.25e-3))
    assert pop.values["member-0"] == copy.values and pop.values["member-2"] == {"lr": 1e-3}
    # the copy's old window says nothing of its new weights: it sits out until a full window of new episodes
    again = {**scores, "member-1": (10.0, window)}
    (second,) = pop.round(24.0, again)
    assert second.target == "member-1" and "member-0" not in second.scores
    later = {**again, "member-0": (5.0, 2 * window), "member-1": (300.0, 2 * window)}
    assert pop.round(36.0, later)[0].target == "member-0"


def test_no_round_while_fewer_than_two_members_have_a_full_window():
    exp, pop = population()
    window = exp.stop.return_window
    assert not pop.round(10.0, {"member-0": (10.0, window), "member-1": (None, 0), "member-2": (5.0, window - 1)})
    assert pop.rounds == 0 and pop.due(10.0)  # not a round: the next look may make one
    assert pop.round(11.0, {"member-0": (10.0, window), "member-2": (5.0, window)})
    assert not pop.due(11.0 + exp.population.interval - 1)


def test_a_resumed_population_takes_its_lineage_back():
    _, pop = population()
    pop.replay(
        [
            {"round": 1, "target": "member-0", "values": {"lr": 8e-4}},
            {"round": 2, "target": "member-3", "values": {"lr": 1e-3}},
        ]
    )
    assert pop.rounds == 2 and pop.values["member-0"] == {"lr": 8e-4} and pop.values["member-3"] == {"lr": 1e-3}


@pytest.mark.parametrize(
    "override, key",
    [
        ("population.size=1", "population.size"),
        ("population.init={lr: [1.0e-3, 1.0e-4]}", "population.init.lr"),
        ("population.explore={epochs: [1, 2]}", "population.explore.epochs"),
        ("population.explore={lr: [0]}", "population.explore.lr"),
        ("population.fraction=0.75", "population.fraction"),
        ("workers.trainer.count=2", "workers.trainer.count"),
        ("workers.placement=impala", "workers.placement"),
        ("workers.eval.count=1", "workers.eval.count"),
    ],
)
def test_population_settings_that_cannot_work_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        with_overrides(config.load(EXPERIMENT), [override])


def test_each_member_has_its_own_actors_policy_worker_and_trainer_and_the_manager_reaches_every_trainer():
    exp = with_overrides(config.load(EXPERIMENT), ["workers.actor.count=2"])
    g = graph.build(exp)
    assert g.policies() == ["member-0", "member-1", "member-2", "member-3"]
    assert g.worker(graph.CONTROLLER).handlers == ("controller", "population")
    for k, member in enumerate(g.policies()):
        (trainer,) = g.trainers(member)
        own = (f"actor/{2 * k}", f"actor/{2 * k + 1}")
        assert g.served_by("samples", trainer.name).clients == own
        assert all(g.worker(a).policy == member and g.acted_for(a) == [member] for a in own)
        (inference,) = [s for s in g.streams if s.kind == "inference" and g.worker(s.server).policy == member]
        assert inference.clients == own
        assert g.served_by("population", trainer.name).clients == (graph.CONTROLLER,)
        assert graph.CONTROLLER in g.served_by("parameters", trainer.name).clients


@pytest.mark.e2e
def test_a_population_copies_weights_and_hyperparameters_from_its_best_member_and_records_the_lineage(tmp_path):
    run_dir = tmp_path / "run"
    _, summary = run_local(
        EXPERIMENT,
        run_dir,
        "population.size=2",
        "population.fraction=0.5",
        "population.init={lr: [1.0e-5, 1.0e-3]}",
        "population.interval=3",
        "stop.return_window=5",
        "stop.target_return=null",
        "stop.wall_time=25",
    )
    assert summary["status"] == "succeeded"
    assert_every_frame_accounted_for(summary)
    assert set(summary["policies"]) == {"member-0", "member-1"}
    lineage = [json.loads(line) for line in (run_dir / "population" / "lineage.jsonl").read_text().splitlines()]
    assert len(lineage) >= 2, lineage
    assert [r["round"] for r in lineage] == list(range(1, len(lineage) + 1))
    for record in lineage:  # two members: the worse copies the better, with the lr multiplied by 0.8 or 1.25
        assert {record["target"], record["source"]} == {"member-0", "member-1"}
        assert record["scores"][record["target"]] <= record["scores"][record["source"]]
    for member in ("member-0", "member-1"):
        copies = [r for r in lineage if r["target"] == member]
        trainer = f"trainer-{member[-1]}"
        with h5py.File(run_dir / "traces" / f"{trainer}.h5") as f:
            applied = {name: f["copy"][name][:] for name in f["copy"]} if "copy" in f else {"round": []}
            steps = {name: f["train_step"][name][:] for name in ("version", "lr")}
        assert list(applied["round"]) == [r["round"] for r in copies]  # every copy sent was applied, in order
        for i, record in enumerate(copies):
            # the weights loaded are those the manager sent: the source's, bit for bit
            assert applied["checksum"][i] == record["checksum"]
            assert applied["source_version"][i] == record["source_version"]
            assert applied["new_lr"][i] == pytest.approx(record["values"]["lr"])
            # and it trains with its new learning rate from the next update, its old one before
            version = applied["version"][i]
            after = steps["lr"][steps["version"] > version]
            before = steps["lr"][steps["version"] <= version - 1]
            assert len(after) and after[0] == pytest.approx(record["values"]["lr"]), (record, after[:3])
            assert before[-1] == pytest.approx(record["previous"]["lr"]), (record, before[-3:])
    with h5py.File(run_dir / "traces" / "controller-0.h5") as f:
        assert list(f["copy"]["round"][:]) == [r["round"] for r in lineage]
    report = subprocess.run([script("srl-trace"), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert f"population: {len(lineage)} copies in {lineage[-1]['round']} rounds" in report.stdout, report.stdout
