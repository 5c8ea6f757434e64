"""Start-up on the local Slurm when one worker never arrives: killed before Python starts, or refused by its own
node's open-files limit. The others stop waiting within seconds and `status` names the worker; nothing waits for
the barrier's timeout."""

import json
import re

import pytest

from conftest import experiment, no_process_left, srl
from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.services import limits

pytestmark = pytest.mark.slurm


def test_a_worker_killed_before_python_starts_ends_the_job_naming_it(tmp_path):
    """srun reports the SIGKILLed task; the srun guard's start watch abandons the barrier for it and ends srun,
    whose other tasks wait inside MPI_Init's fence, which the dead task never joined."""
    run_dir = tmp_path / "run"
    kill_policy = '[ "$SLURM_PROCID" != 2 ] || kill -9 $$'  # task 2 is policy/0
    proc = srl(
        experiment(tmp_path),
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        f"slurm.node_setup=[{json.dumps(kill_policy)}]",
        timeout=180,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    output = "".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert re.search(r"start_watch: task 2 \(policy/0\) on n\d ended before the rendezvous \(Killed\)", output), output
    out = srl("status", run_dir).stdout
    assert "worker policy/0 exited before the rendezvous" in out, out
    no_process_left(run_dir)


def test_a_worker_whose_node_limits_open_files_too_low_is_refused_and_ends_the_job(tmp_path):
    """Only the policy worker needs more descriptors than the hard limit its node gives: it says so, joins MPI's
    start so that the others reach the barrier, and abandons it. Four actors: with fewer, an actor (a fixed need,
    its connections watched) would need as many as the policy worker (three per actor)."""
    path, actors = experiment(tmp_path), "workers.actor.count=4"
    graph = wiring.build(config.with_overrides(config.load(path), [actors]))
    needs = {name: limits.descriptors_needed(graph, name) for name in graph.names}
    hard = needs["policy/0"] - 1
    assert all(need <= hard for name, need in needs.items() if name != "policy/0"), needs
    run_dir = tmp_path / "run"
    proc = srl(
        path,
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        actors,
        "--set",
        f"slurm.node_setup=['ulimit -Sn {hard}; ulimit -Hn {hard}']",
        timeout=180,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = srl("status", run_dir).stdout
    assert "worker policy/0 exited before the rendezvous" in out, out
    assert f"policy/0 needs about {needs['policy/0']} open files" in out and f"is {hard} here" in out, out
    no_process_left(run_dir)
