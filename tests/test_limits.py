"""Open-files limits as clusters set them: a soft RLIMIT_NOFILE far under the hard one (raised by every worker at
start), and a hard one too low for the run (refused before it starts, naming the limit).

The limits are set in a child process (`ulimit` in bash): lowering a hard limit cannot be undone in a process.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from conftest import ROOT, assert_every_frame_accounted_for, srl
from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.services import limits
from srl_hpc.trace import reader

CARTPOLE = ROOT / "experiments" / "cartpole_ppo.yaml"


def graph_with_actors(n: int) -> wiring.Graph:
    exp = config.load(CARTPOLE)
    actor = dataclasses.replace(exp.workers.actor, count=n)
    return wiring.build(dataclasses.replace(exp, workers=dataclasses.replace(exp.workers, actor=actor)))


def test_servers_need_descriptors_in_proportion_to_their_clients_and_actors_do_not():
    small, big = graph_with_actors(4), graph_with_actors(100)
    grown = {
        name: limits.descriptors_needed(big, name) - limits.descriptors_needed(small, name)
        for name in ("controller/0", "trainer/0", "policy/0", "actor/0")
    }
    # 96 more actors: each is a client of the controller (events and commands), of the trainer (samples and
    # credits) and of the policy worker (a shared-memory inference client)
    assert grown == {"controller/0": 2 * 96, "trainer/0": 2 * 96, "policy/0": 3 * 96, "actor/0": 0}
    assert limits.largest_need(big) == ("policy/0", limits.descriptors_needed(big, "policy/0"))
    # sockets do not grow with the clients: an actor's are a few per stream, and the monitors on two of them
    assert limits.sockets_needed(big, "actor/0") == limits.sockets_needed(small, "actor/0") <= 10


def _in_child(code: str, soft: int, hard: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'ulimit -Sn {soft} && ulimit -Hn {hard} && exec "$@"', "child", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_soft_limit_is_raised_to_the_hard_one():
    code = (
        "import resource; from srl_hpc.services import limits; "
        "print(limits.raise_open_files(100, 'policy/0', 20), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    proc = _in_child(code, soft=64, hard=512)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["(512,", "512)", "(512,", "512)"]


def test_a_hard_limit_under_the_need_is_refused_naming_it():
    code = "from srl_hpc.services import limits; limits.raise_open_files(300, 'policy/0', 120)"
    proc = _in_child(code, soft=64, hard=200)
    assert proc.returncode == 1
    assert "LimitError: policy/0 needs about 300 open files in a run of 120 workers" in proc.stderr
    assert "hard open-files limit (RLIMIT_NOFILE, `ulimit -Hn`) is 200" in proc.stderr


@pytest.mark.e2e
def test_a_local_run_under_a_hard_limit_too_low_is_refused_before_it_starts(tmp_path):
    run_dir = tmp_path / "run"
    limited = ["bash", "-c", 'ulimit -Sn 100 && ulimit -Hn 100 && exec "$@"', "launch"]
    proc = srl(CARTPOLE, "--run-dir", run_dir, "--set", "workers.actor.count=16", timeout=120, prefix=[*limited])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "policy/0 needs about" in proc.stderr and "is 100 here" in proc.stderr, proc.stderr
    assert not (run_dir / "logs").exists() or not any((run_dir / "logs").iterdir())  # nothing started


@pytest.mark.e2e
def test_sixteen_actors_under_a_soft_limit_of_64_reach_the_target(tmp_path):
    """What clusters' users meet, scaled down: a soft nofile of 64, under what the policy worker of 16 actors holds.
    Every worker raises its soft limit, the run reaches its target, and no worker held more descriptors than
    its planned need (the heartbeat rows' open_files)."""
    run_dir = tmp_path / "run"
    proc = srl(
        CARTPOLE,
        "--run-dir",
        run_dir,
        "--set",
        "workers.actor.count=16",
        "--set",
        "stop.target_return=200",  # the limit is the point, not the return
        timeout=400,
        prefix=["bash", "-c", 'ulimit -Sn 64; exec "$@"', "launch"],
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = reader.read_run(run_dir).meta["summary"]
    assert summary["reason"].startswith("target reached"), summary
    assert_every_frame_accounted_for(summary)
    graph = graph_with_actors(16)
    held = {w.name: int(w.table("heartbeat")["open_files"].max()) for w in reader.read_run(run_dir).workers}
    assert set(held) == set(graph.names)
    over = {
        n: (h, limits.descriptors_needed(graph, n)) for n, h in held.items() if h > limits.descriptors_needed(graph, n)
    }
    assert not over, over
    assert held["policy/0"] > 64  # the soft limit it started with would not have held it
