"""The wiring graph (pure): placements rewrite where the policy handler lives, replay adds buffers, the
het groups and the docs' graph listings follow from it."""

import re
import shlex

from conftest import ROOT
from launcher import plan
from launcher.commands import graph as graph_command
from srl_hpc import config, graph

BASE = "stop: {wall_time: 1}\nworkers:\n  actor: {count: 3}\n"


def build(text):
    return graph.build(config.loads(text))


def test_placements_move_the_policy_handler():
    srl = build(BASE + "  policy: {count: 2}\n")
    assert [w.handlers for w in srl.workers if w.kind == "policy"] == [("policy",), ("policy",)]
    assert [s.clients for s in srl.streams if s.kind == "inference"] == [("actor/0", "actor/2"), ("actor/1",)]
    impala = build(BASE + "  placement: impala\n  policy: {count: 0}\n")
    assert all(w.handlers == ("actor", "policy") for w in impala.workers if w.kind == "actor")
    assert {s.transport for s in impala.streams if s.kind == "inference"} == {"inline"}
    seed = build(BASE + "  placement: seed\n  policy: {count: 0}\n")
    assert seed.worker("trainer/0").handlers == ("trainer", "policy")
    assert seed.served_by("parameters", "trainer/0").transport == "inline"
    assert [g for g, _ in seed.groups()] == ["trainer", "actor"]


def test_each_policy_has_its_own_policy_workers_trainers_and_weights_and_every_actor_reaches_both():
    g = build(
        BASE + "  policy: {count: 2}\n  trainer: {count: 2}\npolicies: {predator: [adversary_*], prey: [agent_*]}\n"
    )
    assert g.policies() == ["predator", "prey"]
    assert [w.name for w in g.trainers("prey")] == ["trainer/2", "trainer/3"]  # prey's ranks 0 and 1
    assert {w.name: w.policy for w in g.workers if w.kind == "policy"} == {
        "policy/0": "predator",
        "policy/1": "predator",
        "policy/2": "prey",
        "policy/3": "prey",
    }
    for actor in ("actor/0", "actor/1", "actor/2"):  # one policy worker of each policy, every trainer
        assert sorted(g.worker(s.server).policy for s in g.servers_for("inference", actor)) == ["predator", "prey"]
        assert len(g.servers_for("samples", actor)) == len(g.servers_for("credits", actor)) == 4
    # each policy's weights go from its first trainer to its own policy workers only
    assert {s.server: s.clients for s in g.streams if s.kind == "parameters"} == {
        "trainer/0": ("policy/0", "policy/1"),
        "trainer/2": ("policy/2", "policy/3"),
    }
    assert [group for group, _ in g.groups()] == ["trainer", "policy", "actor"]  # one het job as ever


def test_weights_reach_many_subscribers_through_a_tree_of_relays():
    assert graph.parameter_tree("t", ("a", "b", "c"), 4) == [("t", ("a", "b", "c"))]  # few: no relays
    names = tuple(f"s{i}" for i in range(11))
    tree = graph.parameter_tree("t", names, 2)
    assert tree[0] == ("t", ("s0", "s1"))
    assert all(len(children) <= 2 for _, children in tree)
    received = [c for _, children in tree for c in children]
    assert sorted(received) == sorted(names)  # each subscriber has exactly one sender
    senders = [s for s, _ in tree]
    assert all(senders.index(parent) < senders.index(s) for parent, children in tree for s in children if s in senders)
    g = build(
        "stop: {wall_time: 1}\nworkers:\n  placement: impala\n  parameter_fanout: 2\n  policy: {count: 0}\n"
        "  actor: {count: 5}\n  eval: {count: 1}\n"
    )
    assert g.served_by("parameters", "trainer/0").clients == ("actor/0", "actor/1", "eval/0")
    assert g.served_by("parameters", "actor/0").clients == ("actor/2", "actor/3")
    assert g.served_by("parameters", "actor/1").clients == ("actor/4",)
    assert [w.name for w in g.workers if "relay" in w.handlers] == ["actor/0", "actor/1"]
    assert g.worker("actor/0").handlers == ("actor", "policy", "relay")


def test_evaluation_workers_are_a_het_group_that_subscribes_to_the_weights():
    g = build(BASE + "  eval: {count: 2}\n")
    assert [name for name, _ in g.groups()] == ["trainer", "policy", "actor", "eval"]
    assert g.served_by("parameters", "trainer/0").clients == ("policy/0", "eval/0", "eval/1")
    assert {"eval/0", "eval/1"} <= set(g.served_by("control", "controller/0").clients)
    seed = build(BASE + "  placement: seed\n  policy: {count: 0}\n  eval: {count: 1}\n")  # inline for its own policy
    assert [(s.clients, s.transport) for s in seed.streams if s.kind == "parameters"] == [
        (("trainer/0",), "inline"),
        (("eval/0",), "zmq"),
    ]
    assert seed.servers_for("parameters", "eval/0")[0].transport == "zmq"


def test_replay_puts_buffers_between_actors_and_trainers():
    g = build(
        "algorithm: {name: dqn}\nstop: {wall_time: 1}\n"
        "workers: {actor: {count: 3}, buffer: {count: 2}, trainer: {count: 2}}\n"
    )
    assert [name for name, _ in g.groups()] == ["trainer", "policy", "buffer", "actor"]
    assert g.served_by("samples", "buffer/0").clients == ("actor/0", "actor/2")
    assert g.servers_for("replay", "buffer/1") == [
        g.served_by("replay", "trainer/0"),
        g.served_by("replay", "trainer/1"),
    ]
    assert [w for w in g.names if g.drains(w)] == ["buffer/0", "buffer/1"]  # trainers no longer drain frames
    groups = {
        grp.name: grp
        for grp in plan.make_plan(
            config.loads(
                "algorithm: {name: dqn}\nstop: {wall_time: 1}\nworkers: {buffer: {count: 2}}\n"
                "slurm: {buffer: {tasks_per_node: 2, mem_per_task: 2G}}\n"
            ),
            "/r",
            "python",
        ).groups
    }
    assert groups["buffer"].workers == ("buffer/0", "buffer/1") and groups["buffer"].nodes == 1
    assert groups["buffer"].mem_mb == 4096


def test_the_docs_show_the_real_graph_of_every_shipped_experiment(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the user-code examples, as their files say
    text = (ROOT / "docs" / "architecture.md").read_text()
    blocks = re.findall(r"```\n\$ srl-launch graph ([^\n]+)\n(.*?)```", text, re.S)
    shown = {shlex.split(args)[0] for args, _ in blocks}
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "experiments").glob("*.yaml")}
    assert shown == shipped
    for args, listing in blocks:
        argv = shlex.split(args)
        assert graph_command.main([str(ROOT / argv[0]), *argv[1:]]) == 0
        assert capsys.readouterr().out == listing, f"docs/architecture.md is stale for: srl-launch graph {args}"
