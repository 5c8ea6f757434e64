"""Prioritized experience replay and n-step transitions for off-policy learners (DQN family).

Off-policy learners reuse old experience, and learn faster when they replay surprising transitions more
often (Schaul et al. 2016). `SumTree` makes proportional sampling O(log N) per draw; `PrioritizedReplay`
keeps a fixed-size ring of transitions with their priorities; `nstep_transitions` turns the per-step
sequences that actors send into n-step transitions. Everything is vectorised numpy, with no torch, so the
buffer can live in any worker process.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class SumTree:
    """A binary tree whose parents hold the sum of their children, over `capacity` non-negative leaves.

    The tree is one flat float64 array: the root is at index 1, the children of node i are 2i and 2i + 1,
    and the leaves sit at [size, 2 * size), where size is `capacity` rounded up to a power of two.
    Padding leaves stay 0, so they are never found.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._depth = (capacity - 1).bit_length()
        self._size = 1 << self._depth
        self._tree = np.zeros(2 * self._size, np.float64)

    def _leaves(self, indices: np.ndarray) -> np.ndarray:
        """Tree positions of leaf indices, after a bounds check."""
        indices = np.asarray(indices, np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise IndexError(f"leaf index out of range [0, {self.capacity})")
        return indices + self._size

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set leaf priorities (the last value wins for a repeated index) and recompute their ancestors."""
        nodes = self._leaves(indices)
        priorities = np.broadcast_to(np.asarray(priorities, np.float64), nodes.shape).ravel()
        nodes = nodes.ravel()
        if not np.all(np.isfinite(priorities) & (priorities >= 0)):
            raise ValueError("priorities must be finite and >= 0")
        # np.unique keeps the first occurrence, so look from the end to keep the last one.
        nodes, last = np.unique(nodes[::-1], return_index=True)
        self._tree[nodes] = priorities[::-1][last]
        for _ in range(self._depth):
            nodes = np.unique(nodes // 2)
            self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self._tree[1])

    @property
    def max_priority(self) -> float:
        """The largest priority, or 1.0 while every priority is 0."""
        largest = float(self._tree[self._size : self._size + self.capacity].max())
        return largest if largest > 0 else 1.0

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """Priorities of the given leaves."""
        return self._tree[self._leaves(indices)]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each value in [0, total), the leaf whose cumulative-priority interval contains it.

        The descent only turns right into a subtree with positive sum, and values are clipped at 0, so a
        leaf of priority 0 is never returned while total > 0: a value pushed to or past total by float
        round-off lands on the last leaf with positive priority.
        """
        values = np.maximum(np.asarray(values, np.float64), 0.0)
        nodes = np.ones(values.shape, np.int64)
        for _ in range(self._depth):
            left = self._tree[2 * nodes]
            go_right = (values >= left) & (self._tree[2 * nodes + 1] > 0)
            values = np.where(go_right, values - left, values)
            nodes = 2 * nodes + go_right
        return nodes - self._size

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """`batch` leaves drawn proportionally to priority, one uniform draw in each of `batch` equal slices."""
        total = self.total
        if total <= 0:
            raise ValueError("cannot sample from a sum tree whose priorities are all 0")
        return self.find((np.arange(batch) + rng.random(batch)) * (total / batch))


class PrioritizedReplay:
    """A fixed-size ring of transitions, sampled proportionally to priority ** alpha.

    `fields` maps each field name to (per-item shape, dtype); its storage is allocated up front.
    Importance weights (N * P(i)) ** -beta correct the bias that non-uniform sampling adds to the updates.
    """

    def __init__(
        self,
        capacity: int,
        fields: dict[str, tuple[tuple[int, ...], np.dtype | str]],
        alpha: float = 0.6,
        eps: float = 1e-6,
        seed: int = 0,
    ) -> None:
        self.capacity = capacity
        self.alpha = alpha
        self.eps = eps
        self.added = 0
        self.sampled = 0
        self._shapes = {name: tuple(shape) for name, (shape, _) in fields.items()}
        self._storage = {name: np.zeros((capacity, *shape), dtype) for name, (shape, dtype) in fields.items()}
        self._tree = SumTree(capacity)
        self._rng = np.random.default_rng(seed)
        self._cursor = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, items: dict[str, np.ndarray]) -> np.ndarray:
        """Append k items over the oldest ones at the current max priority; return the slots written.

        When k exceeds capacity only the last `capacity` items are kept.
        """
        if items.keys() != self._storage.keys():
            raise ValueError(f"expected fields {sorted(self._storage)}, got {sorted(items)}")
        k = len(next(iter(items.values())))
        for name, array in items.items():
            if np.shape(array) != (k, *self._shapes[name]):
                raise ValueError(f"field {name!r}: expected shape {(k, *self._shapes[name])}, got {np.shape(array)}")
        kept = min(k, self.capacity)
        slots = (self._cursor + k - kept + np.arange(kept)) % self.capacity
        for name, array in items.items():
            self._storage[name][slots] = np.asarray(array)[k - kept :]
        self._tree.update(slots, np.full(kept, self._tree.max_priority))
        self._cursor = (self._cursor + k) % self.capacity
        self._size = min(self._size + k, self.capacity)
        self.added += k
        return slots

    def sample(self, batch: int, beta: float) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """(indices, copies of the stored fields there, float32 importance weights with max 1)."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        indices = self._tree.sample(batch, self._rng)
        probs = self._tree.priorities(indices) / self._tree.total
        weights = (self._size * probs) ** -beta
        self.sampled += batch
        data = {name: array[indices] for name, array in self._storage.items()}
        return indices, data, (weights / weights.max()).astype(np.float32)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of sampled items to (|td error| + eps) ** alpha."""
        self._tree.update(indices, (np.abs(np.asarray(td_errors, np.float64)) + self.eps) ** self.alpha)

    def snapshot(self) -> dict[str, np.ndarray]:
        """What a checkpoint keeps of the replay: its items (`item/<field>`) in their slots, their priorities and
        the slot the next item goes to."""
        return {
            **{f"item/{name}": array[: self._size] for name, array in self._storage.items()},
            "priorities": self._tree.priorities(np.arange(self._size)),
            "cursor": np.asarray(self._cursor, np.int64),
        }

    @classmethod
    def from_snapshot(
        cls, snapshot: Mapping[str, np.ndarray], capacity: int, alpha: float = 0.6, seed: int = 0
    ) -> PrioritizedReplay:
        """A replay holding a snapshot's items in their slots at their priorities, the next item going where it
        would have; its counts of items added and sampled start at 0. The capacity must be the snapshot's."""
        items = {key.removeprefix("item/"): array for key, array in snapshot.items() if key.startswith("item/")}
        size = len(snapshot["priorities"])
        if size > capacity or (size < capacity and int(snapshot["cursor"]) != size):
            raise ValueError(f"a snapshot of {size} items does not fit a replay of capacity {capacity}")
        replay = cls(capacity, {name: (a.shape[1:], a.dtype) for name, a in items.items()}, alpha=alpha, seed=seed)
        for name, array in items.items():
            replay._storage[name][:size] = array
        replay._tree.update(np.arange(size), snapshot["priorities"])
        replay._cursor, replay._size = int(snapshot["cursor"]), size
        return replay


def nstep_transitions(seq: dict[str, np.ndarray], n: int, gamma: float) -> dict[str, np.ndarray]:
    """Turn (E, L) step sequences into n-step transitions (obs, actions, returns, next_obs, discounts).

    `seq` holds `obs` (E, L, *obs_shape), `actions`, `rewards`, `dones` (the episode ended at this step),
    `terminated` (it ended by termination) and `valid` (False on an auto-reset step, whose action was
    ignored, whose reward is 0 and whose obs is the final observation of the episode that ended just
    before). The observation after step t is always obs[:, t + 1].

    A transition from each valid t < L - n sums the rewards of the m = min(n, steps up to and including
    the first done) steps from t, with next_obs = obs[:, t + m] and discount gamma ** m, or 0 when the
    episode terminated at step t + m - 1; truncation bootstraps. The last n steps need observations that
    have not arrived yet, so they emit nothing: the caller keeps them and prepends them to the next
    sequence, and every step then becomes a transition exactly once. Rows are flattened in (env, t) order.
    """
    count = max(np.shape(seq["dones"])[1] - n, 0)
    returns, steps, discounts = nstep_returns(seq, n, gamma, 0, count)
    valid = np.asarray(seq["valid"], bool)[:, :count]
    obs = np.asarray(seq["obs"])
    env = np.arange(len(obs))[:, None]
    return {
        "obs": obs[:, :count][valid],
        "actions": np.asarray(seq["actions"])[:, :count][valid],
        "returns": returns[valid],
        "next_obs": obs[env, np.arange(count)[None, :] + steps][valid],
        "discounts": discounts[valid],
    }


def nstep_returns(
    seq: dict[str, np.ndarray], n: int, gamma: float, start: int, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the steps start .. start+count-1 of (E, L) sequences (L >= start + count + n): the n-step return of
    each, the number of steps m it sums (n, or fewer up to and including the first episode end) and its
    bootstrap discount (gamma ** m, or 0 when the episode terminated at step t + m - 1): the target is
    return + discount * value(step t + m). Each (E, count)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rewards = np.asarray(seq["rewards"], np.float64)
    dones = np.asarray(seq["dones"], bool)
    num_envs = len(dones)
    returns = np.zeros((num_envs, count))
    steps = np.zeros((num_envs, count), np.int64)
    running = np.ones((num_envs, count), bool)  # no episode end yet in [t, t + j)
    for j in range(n):
        window = slice(start + j, start + j + count)
        returns += running * gamma**j * rewards[:, window]
        steps += running
        running &= ~dones[:, window]
    last = start + np.arange(count)[None, :] + steps - 1
    terminated = np.asarray(seq["terminated"], bool)[np.arange(num_envs)[:, None], last]
    return returns.astype(np.float32), steps, np.where(terminated, 0.0, gamma**steps).astype(np.float32)
