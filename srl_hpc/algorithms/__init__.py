"""Algorithms: one file each (ppo.py, ...), read top to bottom, behind one small interface.

What the rest of the system knows about an algorithm without importing torch is its spec
(srl_hpc/algorithm_spec.py). A user's algorithm lives in their own module: a frozen config dataclass (a
`name: str` field, its hyper-parameters, an optional `check()`) with a class attribute `spec`, named by
dotted path in the YAML (examples/my_a2c.py). The torch side (module:Class) has `act(model, obs, explore,
generator, hidden=None)` for policy handlers, optionally `greedy(model, obs, hidden=None)` for evaluation
workers (workers.eval.greedy), both returning arrays by name (with "hidden", the next recurrent state, when
given one), and `prepare`, `update`, `state_dict`, `load_state_dict` for trainer handlers. How a trained
policy is watched (evaluation, rating, `enjoy`) is srl_hpc/algorithms/watching.py.
"""
