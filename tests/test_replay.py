"""Sum tree against brute force and sampling statistics, the prioritized replay ring and its weights,
and n-step transitions against a plain-Python reference and a hand-worked example."""

import numpy as np
import pytest

from srl_hpc.algorithms.replay import PrioritizedReplay, SumTree, nstep_transitions


def assert_proportional(counts: np.ndarray, priorities: np.ndarray, sigmas: float = 5.0) -> None:
    """Each count is within `sigmas` binomial standard deviations of its share of the draws."""
    draws = counts.sum()
    p = priorities / priorities.sum()
    tolerance = sigmas * np.sqrt(draws * p * (1 - p)) + 1e-9
    assert np.all(np.abs(counts - draws * p) <= tolerance), (counts, draws * p)


def tree_with(priorities) -> SumTree:
    tree = SumTree(len(priorities))
    tree.update(np.arange(len(priorities)), np.asarray(priorities, np.float64))
    return tree


# --- SumTree ---


@pytest.mark.parametrize("priorities", [np.arange(1.0, 9.0), np.array([0, 3, 0, 1, 5, 0, 2, 4.0])])
def test_sum_tree_samples_proportionally(priorities):
    tree = tree_with(priorities)
    draws = tree.sample(200_000, np.random.default_rng(1))
    counts = np.bincount(draws, minlength=len(priorities))
    assert len(counts) == len(priorities)
    assert np.all(counts[priorities == 0] == 0)
    assert_proportional(counts, priorities)


def test_sum_tree_non_power_of_two_capacity():
    priorities = np.array([2.0, 0.0, 1.0, 3.0, 0.5, 0.0, 1.5, 4.0, 0.0, 2.0, 1.0])  # 11 leaves, 16 slots
    tree = tree_with(priorities)
    assert tree.total == pytest.approx(priorities.sum())
    counts = np.bincount(tree.sample(100_000, np.random.default_rng(2)), minlength=11)
    assert len(counts) == 11  # padding leaves never come out
    assert np.all(counts[priorities == 0] == 0)
    assert_proportional(counts, priorities)


def test_sum_tree_capacity_one():
    tree = tree_with([0.3])
    assert tree.total == pytest.approx(0.3)
    assert np.all(tree.sample(10, np.random.default_rng(0)) == 0)


def test_sum_tree_repeated_indices_last_value_wins():
    tree = SumTree(6)
    tree.update(np.array([2, 2, 5, 2]), np.array([1.0, 7.0, 3.0, 4.0]))
    assert tree.priorities(np.arange(6)) == pytest.approx([0, 0, 4, 0, 0, 3])
    assert tree.total == pytest.approx(7.0)


def test_sum_tree_total_tracks_many_updates():
    rng = np.random.default_rng(3)
    tree, leaves = SumTree(37), np.zeros(37)
    for _ in range(50):
        indices = rng.integers(0, 37, size=10)
        values = rng.random(10) * rng.integers(0, 2, size=10)  # some zeros
        tree.update(indices, values)
        leaves[indices] = values  # numpy also lets the last repeated index win here
        assert tree.priorities(np.arange(37)) == pytest.approx(leaves)
        assert tree.total == pytest.approx(leaves.sum())
        assert tree.max_priority == pytest.approx(leaves.max() if leaves.max() > 0 else 1.0)


def test_an_empty_sum_tree_totals_zero_and_refuses_to_sample():
    tree = SumTree(5)
    assert tree.total == 0.0
    assert tree.max_priority == 1.0
    with pytest.raises(ValueError):
        tree.sample(4, np.random.default_rng(0))


def test_sum_tree_rejects_bad_input():
    tree = SumTree(4)
    with pytest.raises(ValueError):
        tree.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(IndexError):
        tree.update(np.array([4]), np.array([1.0]))


@pytest.mark.parametrize("integer_valued", [True, False])
def test_find_matches_brute_force_search(integer_valued):
    rng = np.random.default_rng(4)
    priorities = rng.integers(0, 5, size=37).astype(np.float64)  # integers: all sums exact, some zeros
    if not integer_valued:
        priorities *= rng.random(37)
    tree = tree_with(priorities)
    values = rng.random(20_000) * priorities.sum()
    expected = np.searchsorted(np.cumsum(priorities), values, side="right")
    np.testing.assert_array_equal(tree.find(values), expected)


def test_find_outside_the_range_returns_the_nearest_positive_leaf():
    priorities = np.array([0.0, 0.1, 0.2, 0.7, 0.0, 0.0])
    tree = tree_with(priorities)
    edge = np.array([tree.total, np.nextafter(tree.total, 0), tree.total * (1 + 1e-12), 1e9])
    np.testing.assert_array_equal(tree.find(edge), [3, 3, 3, 3])
    np.testing.assert_array_equal(tree.find(np.array([-1e-12, 0.0])), [1, 1])


def test_sample_is_stratified():
    tree = tree_with(np.ones(8))
    for seed in range(5):  # one draw per eighth of the total: every leaf exactly once
        np.testing.assert_array_equal(np.sort(tree.sample(8, np.random.default_rng(seed))), np.arange(8))


# --- PrioritizedReplay ---


def make_replay(capacity: int, **kwargs) -> PrioritizedReplay:
    return PrioritizedReplay(capacity, {"obs": ((2,), np.float32), "action": ((), np.int64)}, **kwargs)


def items(values) -> dict[str, np.ndarray]:
    values = np.asarray(values)
    return {"obs": np.stack([values, -values], axis=1).astype(np.float32), "action": values.astype(np.int64)}


def stored_actions(replay: PrioritizedReplay) -> set[int]:
    _, data, _ = replay.sample(256, beta=0.4)
    return set(data["action"].tolist())


def test_ring_overwrites_the_oldest():
    replay = make_replay(4)
    np.testing.assert_array_equal(replay.add(items([0, 1, 2])), [0, 1, 2])
    assert len(replay) == 3
    np.testing.assert_array_equal(replay.add(items([3, 4, 5])), [3, 0, 1])
    assert len(replay) == 4
    assert replay.added == 6
    assert stored_actions(replay) == {2, 3, 4, 5}


def test_add_more_than_capacity_keeps_the_last_items():
    replay = make_replay(4)
    replay.add(items([0]))
    slots = replay.add(items(np.arange(100, 110)))
    assert len(slots) == 4 and set(slots.tolist()) == {0, 1, 2, 3}
    assert len(replay) == 4 and replay.added == 11
    _, data, _ = replay.sample(256, beta=0.4)
    assert set(data["action"].tolist()) == {106, 107, 108, 109}
    np.testing.assert_array_equal(data["obs"][:, 0], data["action"])  # fields stay aligned
    np.testing.assert_array_equal(data["obs"][:, 1], -data["action"])
    replay.add(items([7]))  # the cursor continues after the wrap: 7 replaces 106, the oldest
    assert stored_actions(replay) == {7, 107, 108, 109}


def test_new_items_get_max_priority():
    replay = make_replay(8, alpha=0.5, eps=0.01)
    slots = replay.add(items([0, 1]))
    assert replay._tree.priorities(slots) == pytest.approx([1.0, 1.0])  # empty tree: max defaults to 1
    replay.update_priorities(slots, np.array([-3.0, 0.5]))
    assert replay._tree.priorities(slots) == pytest.approx([3.01**0.5, 0.51**0.5])
    new = replay.add(items([2, 3]))
    assert replay._tree.priorities(new) == pytest.approx([3.01**0.5] * 2)


def test_update_priorities_changes_sampling_frequencies():
    replay = make_replay(4, alpha=1.0, eps=0.0)
    slots = replay.add(items([0, 1, 2, 3]))
    indices, _, _ = replay.sample(40_000, beta=0.4)
    assert_proportional(np.bincount(indices, minlength=4), np.ones(4))
    td = np.array([1.0, -2.0, 0.0, 5.0])
    replay.update_priorities(slots, td)
    indices, _, _ = replay.sample(80_000, beta=0.4)
    counts = np.bincount(indices, minlength=4)
    assert counts[2] == 0
    assert_proportional(counts, np.abs(td))
    assert replay.sampled == 120_000


def test_importance_weights_match_hand_computation():
    replay = make_replay(4, alpha=1.0, eps=0.0)
    slots = replay.add(items([0, 1, 2]))
    replay.update_priorities(slots, np.array([1.0, 2.0, 5.0]))  # P = 1/8, 2/8, 5/8 and N = 3
    indices, _, weights = replay.sample(64, beta=0.5)
    assert weights.dtype == np.float32
    assert set(indices.tolist()) == {0, 1, 2}
    # w_i = (3 P_i) ** -0.5 over the max, which is w_0 = (3/8) ** -0.5
    by_index = {0: 1.0, 1: (3 / 8) ** 0.5 * (6 / 8) ** -0.5, 2: (3 / 8) ** 0.5 * (15 / 8) ** -0.5}
    assert weights == pytest.approx([by_index[i] for i in indices.tolist()], rel=1e-6)
    assert weights.max() == 1.0
    _, _, flat = replay.sample(16, beta=0.0)
    np.testing.assert_array_equal(flat, np.ones(16, np.float32))


def test_sample_returns_copies():
    replay = make_replay(4)
    replay.add(items([5]))
    _, data, _ = replay.sample(3, beta=0.4)
    data["obs"][:] = 99
    _, again, _ = replay.sample(3, beta=0.4)
    np.testing.assert_array_equal(again["obs"], [[5, -5]] * 3)


def test_sample_empty_raises_and_add_checks_fields():
    replay = make_replay(4)
    with pytest.raises(ValueError):
        replay.sample(2, beta=0.4)
    with pytest.raises(ValueError):
        replay.add({"obs": np.zeros((2, 3), np.float32), "action": np.zeros(2, np.int64)})
    with pytest.raises(ValueError):
        replay.add({"obs": np.zeros((2, 2), np.float32)})


# --- nstep_transitions ---


def random_sequences(rng: np.random.Generator, num_envs: int, length: int) -> dict[str, np.ndarray]:
    """Steps as auto-resetting envs record them: the step after an episode end is an invalid reset step."""
    dones = np.zeros((num_envs, length), bool)
    terminated = np.zeros((num_envs, length), bool)
    valid = np.ones((num_envs, length), bool)
    rewards = rng.normal(size=(num_envs, length))
    for e in range(num_envs):
        valid[e, 0] = rng.random() > 0.2  # the previous sequence may have ended with an episode end
        for t in range(length):
            if t > 0 and dones[e, t - 1]:
                valid[e, t] = False
            if not valid[e, t]:
                rewards[e, t] = 0.0
                continue
            dones[e, t] = rng.random() < 0.25
            terminated[e, t] = dones[e, t] and rng.random() < 0.5
    return {
        "obs": rng.normal(size=(num_envs, length, 2)).astype(np.float32),
        "actions": rng.integers(0, 6, size=(num_envs, length)),
        "rewards": rewards.astype(np.float32),
        "dones": dones,
        "terminated": terminated,
        "valid": valid,
    }


def reference_nstep(seq: dict[str, np.ndarray], n: int, gamma: float) -> dict[str, np.ndarray]:
    """The definition, one transition at a time."""
    rows = {"obs": [], "actions": [], "returns": [], "next_obs": [], "discounts": []}
    num_envs, length = seq["dones"].shape
    for e in range(num_envs):
        for t in range(length - n):
            if not seq["valid"][e, t]:
                continue
            ret, m = 0.0, 0
            for j in range(n):
                ret += gamma**j * float(seq["rewards"][e, t + j])
                m += 1
                if seq["dones"][e, t + j]:
                    break
            rows["obs"].append(seq["obs"][e, t])
            rows["actions"].append(seq["actions"][e, t])
            rows["returns"].append(ret)
            rows["next_obs"].append(seq["obs"][e, t + m])
            rows["discounts"].append(0.0 if seq["terminated"][e, t + m - 1] else gamma**m)
    return {key: np.array(value) for key, value in rows.items()}


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_matches_reference(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        seq = random_sequences(rng, num_envs=4, length=30)
        got = nstep_transitions(seq, n, gamma=0.9)
        want = reference_nstep(seq, n, gamma=0.9)
        assert len(want["actions"]) > 0
        assert got["returns"].dtype == np.float32 and got["discounts"].dtype == np.float32
        for key in ("obs", "actions", "next_obs"):
            np.testing.assert_array_equal(got[key], want[key])
        np.testing.assert_allclose(got["returns"], want["returns"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["discounts"], want["discounts"], rtol=1e-6)


def test_nstep_hand_worked_example():
    #        t:   0    1    2    3    4    5    6    7    8    9   10
    rewards = [1.0, 2.0, 4.0, 0.0, 1.0, 2.0, 0.0, 8.0, 1.0, 1.0, 5.0]
    dones = [0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0]  # ends at 2 (terminated) and at 5 (truncated)
    terminated = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    valid = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1]  # 3 and 6 are auto-reset steps holding final observations
    seq = {
        "obs": 10.0 * np.arange(11)[None],
        "actions": np.arange(11)[None],
        "rewards": np.array([rewards]),
        "dones": np.array([dones], bool),
        "terminated": np.array([terminated], bool),
        "valid": np.array([valid], bool),
    }
    out = nstep_transitions(seq, n=3, gamma=0.5)
    np.testing.assert_array_equal(out["actions"], [0, 1, 2, 4, 5, 7])  # invalid 3, 6 and the last 3 emit nothing
    np.testing.assert_array_equal(out["obs"], [0, 10, 20, 40, 50, 70])
    assert out["returns"] == pytest.approx(
        [
            1 + 0.5 * 2 + 0.25 * 4,  # termination at step 2 cuts the window: m = 3
            2 + 0.5 * 4,  # m = 2
            4,  # m = 1
            1 + 0.5 * 2,  # truncation at step 5: m = 2
            2,  # m = 1
            8 + 0.5 * 1 + 0.25 * 1,  # full window
        ]
    )
    np.testing.assert_array_equal(out["next_obs"], [30, 30, 30, 60, 60, 100])
    assert out["discounts"] == pytest.approx([0, 0, 0, 0.25, 0.5, 0.125])


def test_nstep_chunks_with_n_steps_of_overlap_cover_each_step_once():
    rng = np.random.default_rng(7)
    n, seq = 3, random_sequences(rng, num_envs=1, length=40)
    whole = nstep_transitions(seq, n, gamma=0.9)
    parts = [
        nstep_transitions({k: v[:, start : start + 10 + n] for k, v in seq.items()}, n, gamma=0.9)
        for start in range(0, 40 - n, 10)
    ]  # the last chunk is shorter
    for key in whole:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])


def test_nstep_too_short_sequence_emits_nothing():
    seq = random_sequences(np.random.default_rng(0), num_envs=2, length=3)
    out = nstep_transitions(seq, n=3, gamma=0.9)
    assert out["obs"].shape == (0, 2) and out["returns"].shape == (0,)


@pytest.mark.parametrize("added", [5, 13])  # not yet full, and wrapped around
def test_a_snapshot_restores_items_priorities_and_the_next_slot(added):
    replay = PrioritizedReplay(8, {"obs": ((2,), np.float32), "actions": ((), np.int64)}, seed=1)
    replay.add({"obs": np.arange(added * 2, dtype=np.float32).reshape(added, 2), "actions": np.arange(added)})
    replay.update_priorities(np.array([0, 3]), np.array([5.0, 0.5]))
    snapshot = {k: v.copy() for k, v in replay.snapshot().items()}
    restored = PrioritizedReplay.from_snapshot(snapshot, 8, seed=2)
    assert len(restored) == len(replay) and (restored.added, restored.sampled) == (0, 0)
    every = np.arange(len(replay))
    assert np.array_equal(restored._tree.priorities(every), replay._tree.priorities(every))
    for name in ("obs", "actions"):
        assert np.array_equal(restored._storage[name][: len(replay)], replay._storage[name][: len(replay)])
    item = {"obs": np.full((1, 2), -1, np.float32), "actions": np.array([-1])}
    assert np.array_equal(restored.add(item), replay.add(item))  # the next item goes where it would have
    with pytest.raises(ValueError, match="does not fit a replay of capacity 4"):
        PrioritizedReplay.from_snapshot(snapshot, 4)
