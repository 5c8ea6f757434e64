"""Self-play: turn-taking games as envs of several seats, the opponents' versions chosen per game, and the
opponents' seats never trained on."""

import subprocess

import h5py
import numpy as np
import pytest

from conftest import ROOT, assert_every_frame_accounted_for, run_local, script, srl
from srl_hpc import config
from srl_hpc.algorithm_spec import spec
from srl_hpc.config.loader import ConfigError, with_overrides
from srl_hpc.config.spaces_check import check as check_spaces
from srl_hpc.envs.agents import AgentRows
from srl_hpc.envs.backends import spaces
from srl_hpc.envs.connect_four import connect_four, has_four, one_ply_player
from srl_hpc.envs.fixed_players import random_player
from srl_hpc.envs.turns import play
from srl_hpc.handlers.ring import RingGroup
from srl_hpc.population.opponents import NEWEST, OpponentPool, Seats, fixed_code
from srl_hpc.population.ratings import elo, expected_score
from srl_hpc.services.parameter_db import ParameterDB, snapshot_tag
from srl_hpc.streams.contract import Contract

EXPERIMENT = ROOT / "experiments" / "connect_four_selfplay.yaml"
PASS = 7


def board(mine=(), theirs=()):
    """The mover's Connect Four observation with pieces at (row, column) cells (row 5 the bottom)."""
    planes = np.zeros((6, 7, 2), np.int8)
    for plane, cells in ((0, mine), (1, theirs)):
        for r, c in cells:
            planes[r, c, plane] = 1
    mask = np.append((planes.sum(-1) == 0).any(0), False).astype(np.int8)
    return {"observation": planes, "action_mask": mask}


def test_a_turn_taking_game_gives_every_seat_a_step_per_move_and_the_idle_seat_only_a_pass():
    env = connect_four()
    obs, _ = env.reset(seed=0)
    mover, idle = env.possible_agents
    assert obs[mover]["action_mask"].tolist() == [1] * 7 + [0]
    assert obs[idle]["action_mask"].tolist() == [0] * 7 + [1]
    with pytest.raises(AssertionError, match="out of turn"):
        env.step({mover: 3, idle: 3})
    obs, rewards, terminated, _, _ = env.step({mover: 3, idle: PASS})
    assert obs[idle]["action_mask"][:7].all() and not obs[mover]["action_mask"][:7].any()
    assert obs[mover]["observation"][5, 3, 0] == 1 and obs[idle]["observation"][5, 3, 1] == 1  # each sees its own
    assert rewards == {mover: 0.0, idle: 0.0} and not any(terminated.values())
    for move in (4, 3, 4, 3, 4):  # the second player builds a column while the first stacks on 3
        actions = {a: PASS for a in env.agents}
        actions[env.game.agent_selection] = move
        obs, rewards, terminated, _, _ = env.step(actions)
    assert not any(terminated.values())  # three each, in columns 3 and 4
    actions = {a: PASS for a in env.agents}
    actions[env.game.agent_selection] = 3  # the first player's fourth on column 3
    obs, rewards, terminated, _, _ = env.step(actions)
    assert rewards == {mover: 1.0, idle: -1.0} and all(terminated.values()) and env.agents == []
    assert all(o["action_mask"].tolist() == [0] * 7 + [1] for o in obs.values())  # nothing left to play


def test_the_one_ply_player_wins_when_it_can_else_blocks():
    rng = np.random.default_rng(0)
    player = one_ply_player(rng)
    assert player(board(mine=[(5, 0), (5, 1), (5, 2)], theirs=[(4, 0), (4, 1), (3, 0)])) == 3
    assert player(board(mine=[(5, 6)], theirs=[(5, 2), (4, 2), (3, 2)])) == 2  # blocks the column
    # both: it wins (column 0, on top of its three) rather than block their row's end (column 4)
    assert player(board(mine=[(5, 0), (4, 0), (3, 0)], theirs=[(5, 1), (5, 2), (5, 3)])) == 0
    diagonal = np.pad(np.eye(4, dtype=bool), ((2, 0), (3, 0)))
    broken = diagonal.copy()
    broken[4, 5] = False
    assert has_four(diagonal) and has_four(diagonal[:, ::-1]) and not has_four(broken)
    env = connect_four()
    results = play(env, [one_ply_player(rng), random_player(env, rng)], 100)
    assert np.mean([r["player_0"] > 0 for r in results]) > 0.9  # it beats a random player


def test_opponents_are_the_newest_weights_until_a_snapshot_is_stored_then_snapshots_by_the_rule(tmp_path):
    db = ParameterDB(tmp_path / "parameters")
    rng = np.random.default_rng(0)
    assert OpponentPool(db, "latest", rng).sample() == NEWEST
    uniform = OpponentPool(db, "uniform", rng)
    assert uniform.sample() == NEWEST  # nothing stored yet
    for version in (10, 20, 30):
        db.put(version, {"w": np.zeros(1)})
        db.tag(snapshot_tag(version), version)
    db.put(31, {"w": np.zeros(1)})  # stored but not a snapshot: never an opponent
    db.tag("latest", 31)
    for pool in (uniform, OpponentPool(db, "pfsp", rng)):
        pool._looked_at = float("-inf")  # look at the database again now
        drawn = [pool.sample() for _ in range(600)]
        assert set(drawn) == {10, 20, 30}
    pfsp = OpponentPool(db, "pfsp", np.random.default_rng(1), pfsp_power=2.0)
    pfsp.refresh()
    for _ in range(20):
        pfsp.record(10, +1.0)  # always beaten: hardly played any more
        pfsp.record(30, -1.0)  # always beats the learner: played most
    pfsp.record(20, 0.0)
    weights = dict(zip(pfsp.snapshots, pfsp.weights()))
    assert weights[30] > weights[20] > weights[10] and abs(sum(weights.values()) - 1) < 1e-9
    newest_two = OpponentPool(db, "uniform", rng, size=2)  # the pool: the newest snapshots only
    assert {newest_two.sample() for _ in range(200)} == {20, 30}
    drawn = [pfsp.sample() for _ in range(2000)]
    assert drawn.count(30) > drawn.count(20) > drawn.count(10)


def test_the_learners_seat_moves_round_and_only_its_rows_ask_for_the_newest_weights(tmp_path):
    db = ParameterDB(tmp_path / "parameters")
    db.put(5, {"w": np.zeros(1)})
    db.tag(snapshot_tag(5), 5)
    seats = Seats(3, 2, OpponentPool(db, "uniform", np.random.default_rng(0)))
    assert seats.learner_rows().tolist() == [True, False, False, True, True, False]
    assert seats.versions() == (NEWEST, 5, 5, NEWEST, NEWEST, 5)
    assert seats.episode_over(1, -1.0) == (5, 1)  # the game against 5 ended, the learner on seat 2
    assert seats.learner_rows().tolist() == [True, False, True, False, True, False]
    assert seats.pool.scores[5] == [0.0, 1]


def test_opponent_seats_samples_are_never_trained_on_counted_per_seat(tmp_path):
    """A ring group of real Connect Four games with opponents: every step of every segment is counted by
    whose seat it was (the learner's of that game, or its opponent's) and whether it is marked for training."""
    exp = config.load(EXPERIMENT)
    db = ParameterDB(tmp_path / "parameters")
    db.put(3, {"w": np.zeros(1)})
    db.tag(snapshot_tag(3), 3)
    obs_space, action_space = spaces(exp.env)
    contract = Contract.of(obs_space, action_space, spec(exp.algorithm), exp)
    envs = AgentRows([connect_four() for _ in range(4)])
    seats = Seats(4, 2, OpponentPool(db, "uniform", np.random.default_rng(0)))
    group = RingGroup(envs, 8, 0, contract, seats=seats)
    rng = np.random.default_rng(0)
    counts = {"learner": [0, 0], "opponent": [0, 0]}  # [trained, not trained]
    games_by_seat = [0, 0]
    learner_at, segments = [], []
    for _ in range(200):
        masks = contract.obs.unpack(group.obs)["action_mask"]
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        reply = {name: np.zeros((len(actions), *shape), dtype) for name, dtype, shape in contract.reply_fields()}
        reply["actions"] = actions
        learner_at.append(seats.learner_rows().copy())
        if group.full:
            segments.append((group.bootstrap(reply), learner_at[-1 - group.T : -1]))
        group.advance(reply, 1)
        for _, seat, _ in group.finished_games:
            games_by_seat[seat] += 1
        group.finished_games = []
    for segment, learner in segments:
        for t, rows in enumerate(learner):
            valid = segment["valid"][:, t]
            counts["learner"][0] += int(valid[rows].sum())
            counts["learner"][1] += int((~valid[rows]).sum())
            counts["opponent"][0] += int(valid[~rows].sum())
            counts["opponent"][1] += int((~valid[~rows]).sum())
    assert len(segments) > 10 and counts["opponent"][0] == 0, counts
    assert counts["opponent"][1] > 0 and counts["learner"][0] > 0.8 * counts["opponent"][1], counts
    assert min(games_by_seat) > 0  # the learner played both seats


def test_a_fixed_player_takes_its_share_of_the_games_and_moves_instead_of_the_policy_when_its_turn(tmp_path):
    db = ParameterDB(tmp_path / "parameters")
    db.put(5, {"w": np.zeros(1)})
    db.tag(snapshot_tag(5), 5)
    one_ply = fixed_code("one-ply")
    pool = OpponentPool(db, "uniform", np.random.default_rng(0), fixed={"one-ply": 0.25}, env=connect_four())
    drawn = [pool.sample() for _ in range(4000)]
    assert set(drawn) == {5, one_ply} and 0.22 < drawn.count(one_ply) / len(drawn) < 0.28
    seats = Seats(2, 2, pool)
    seats.opponent[:] = [one_ply, 5]  # game 0 against the one-ply player, game 1 against version 5
    assert seats.versions() == (NEWEST, NEWEST, 5, NEWEST)  # the fixed player's row asks for the newest weights
    # game 0: the fixed player (row 1) is to move and can win in column 3; game 1: version 5's row (row 2) moves
    rows = [board(), board(mine=[(5, 3), (4, 3), (3, 3)], theirs=[(5, 0), (5, 1)]), board(), board()]
    for row in (0, 3):
        rows[row]["action_mask"] = np.eye(PASS + 1, dtype=np.int8)[PASS]  # not their turn: pass only
    exp = config.load(EXPERIMENT)
    contract = Contract.of(*spaces(exp.env), spec(exp.algorithm), exp)
    obs = contract.obs.pack({key: np.stack([r[key] for r in rows]) for key in rows[0]})
    policy = np.array([PASS, 6, 2, PASS])
    assert seats.fixed_moves(policy, obs, contract.obs.unpack).tolist() == [PASS, 3, 2, PASS]
    assert policy.tolist() == [PASS, 6, 2, PASS]  # (a reply's own array is not written to)
    seats.episode_over(0, -1.0)
    assert pool.scores[one_ply] == [0.0, 1]


@pytest.mark.parametrize(
    "override, message",
    [
        ("opponents.fixed={two-ply: 0.5}", "no fixed player 'two-ply'"),
        ("opponents.fixed={one-ply: 1.5}", "in \\(0, 1\\]"),
        ("opponents.fixed={one-ply: 0.6, random: 0.6}", "add up to 1.2"),
        ("opponents.rule=none", "set opponents.rule"),
    ],
)
def test_fixed_opponents_that_cannot_work_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=f"opponents\\.fixed.*{message}"):
        with_overrides(config.load(EXPERIMENT), ["opponents.fixed={one-ply: 0.25}", override])


def test_elo_is_fitted_to_all_games_at_once_whatever_their_order():
    results = {("a", "random"): [76, 100], ("b", "a"): [50, 100], ("c", "b"): [24, 100]}
    ratings = elo(results, "random")
    assert ratings["random"] == 0.0
    assert abs(expected_score(ratings["a"], 0.0) - 0.76) < 0.02  # what a's games against random say
    assert abs(ratings["b"] - ratings["a"]) < 5 and ratings["c"] < ratings["b"] - 150
    assert elo(dict(reversed(results.items())), "random") == pytest.approx(ratings)
    unbeaten = elo({(1, "random"): [10, 10]}, "random")[1]  # the imagined draw keeps it finite
    assert 300 < unbeaten < 1000


@pytest.mark.parametrize(
    "override, key",
    [
        ("policies={a: ['player_0'], b: ['player_1']}", "policies"),
        ("workers.trainer.snapshot_every=0", "workers.trainer.snapshot_every"),
        ("stop.target_eval_return=0.5", "stop.target_eval_return"),
    ],
)
def test_self_play_settings_that_cannot_work_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        with_overrides(config.load(EXPERIMENT), [override])


def test_self_play_on_a_single_agent_env_is_refused_at_validate():
    exp = with_overrides(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"), ["opponents.rule=latest"])
    with pytest.raises(ConfigError, match="opponents.rule.*one agent"):
        check_spaces(exp, "cartpole_ppo.yaml")


@pytest.mark.e2e
def test_self_play_trains_the_learners_seat_against_stored_versions_rates_them_and_beats_a_random_player(tmp_path):
    run_dir = tmp_path / "run"
    _, summary = run_local(
        EXPERIMENT,
        run_dir,
        "stop.wall_time=30",
        "workers.trainer.snapshot_every=5",
        "workers.actor.count=1",
        "workers.eval.interval=1",
        "workers.eval.episodes=6",
        "opponents.fixed={one-ply: 0.1}",
    )
    assert summary["status"] == "succeeded" and summary["policy_version"] > 20
    assert_every_frame_accounted_for(summary)
    with h5py.File(run_dir / "traces" / "actor-0.h5") as f:
        games = f["game"]
        opponents, seats = games["opponent"][:], games["seat"][:]
        lengths = f["episode"]["length"][:]
    with h5py.File(run_dir / "traces" / "policy-0.h5") as f:
        loads = f["opponent_load"]["version"][:].tolist()
    loaded = set(loads)
    assert set(opponents[opponents >= 0].tolist()) <= loaded and len(loaded) >= 2
    assert 0.05 < np.mean(opponents == fixed_code("one-ply")) < 0.15  # the fixed player's share of the games
    assert len(loads) == len(loaded), loads  # each loaded once: the policy worker holds the actors' pool
    assert set(seats.tolist()) == {0, 1}
    # frames are the learner's steps, one per move of its games: the opponents' seats would double them
    assert len(lengths) == len(opponents) and summary["env_frames"] < lengths.sum() + 64 * 32
    # the rating worker: Elo of snapshots, fixed players as negative versions, the best tagged
    with h5py.File(run_dir / "traces" / "eval-0.h5") as f:
        rating = f["rating"]
        rounds, versions, ratings = rating["round"][:], rating["version"][:], rating["elo"][:]
    last = rounds == rounds.max()
    assert rounds.max() >= 2 and {-1, -2} <= set(versions[last].tolist()) and (versions[last] >= 5).sum() >= 2
    assert ratings[last][versions[last] == -1].tolist() == [0.0]  # the random player anchors the scale
    db = ParameterDB(run_dir / "parameters" / "default")
    stored = dict((p if isinstance(p, str) else int(p), r) for p, r in db.ratings()["elo"])
    best = db.tags()["best"]
    assert best["version"] == max((v for v in stored if isinstance(v, int)), key=stored.get)
    assert best["elo"] == pytest.approx(stored[best["version"]])
    listing = srl("params", run_dir, timeout=60).stdout
    assert "fixed players: random 0, one-ply" in listing, listing
    row = next(line.split() for line in listing.splitlines() if line.split()[:1] == [str(best["version"])])
    assert "best" in row[2:] and f"snapshot-{best['version']}" in row[2:], listing  # (the newest is also `latest`)
    plots = subprocess.run(
        [script("srl-trace"), str(run_dir), "--plot", str(tmp_path / "plots")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plots.returncode == 0 and (tmp_path / "plots" / "ratings.png").stat().st_size > 0, plots.stderr
    assert f"best version {best['version']} " in plots.stdout and "against the one-ply player" in plots.stdout, (
        plots.stdout
    )
    duel = srl("enjoy", run_dir, "--against", "random", "--games", "100", timeout=120)
    assert duel.returncode == 0, duel.stderr
    won = int(duel.stdout.split("won ")[1].split()[0])
    assert won >= 70, duel.stdout  # a random policy wins about half
