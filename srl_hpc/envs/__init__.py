"""Environments. Importing this package registers srl-hpc's own gymnasium ids (testing.py, synthetic.py, masked.py,
structured.py, tictactoe.py)."""

import gymnasium

gymnasium.register(id="srl_hpc/CrashAfter-v0", entry_point="srl_hpc.envs.testing:CrashAfter", max_episode_steps=500)
gymnasium.register(id="srl_hpc/SlowStep-v0", entry_point="srl_hpc.envs.testing:SlowStep", max_episode_steps=500)
gymnasium.register(id="srl_hpc/Synthetic-v0", entry_point="srl_hpc.envs.synthetic:Synthetic")  # episodes end themselves
gymnasium.register(
    id="srl_hpc/CartPoleNoVelocity-v1",
    entry_point="srl_hpc.envs.masked:cartpole_no_velocity",
    max_episode_steps=500,
    reward_threshold=475.0,
)
gymnasium.register(
    id="srl_hpc/CartPoleMultiDiscrete-v1",
    entry_point="srl_hpc.envs.structured:cartpole_multi_discrete",
    max_episode_steps=500,
    reward_threshold=475.0,
)
gymnasium.register(
    id="srl_hpc/CartPoleDict-v1",
    entry_point="srl_hpc.envs.structured:cartpole_dict",
    max_episode_steps=500,
    reward_threshold=475.0,
)
gymnasium.register(id="srl_hpc/TicTacToe-v0", entry_point="srl_hpc.envs.tictactoe:TicTacToe")
