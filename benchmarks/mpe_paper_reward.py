"""A run's MPE spread policy scored as the MAPPO paper (Yu et al., 2022) scores spread, beside the env's own
returns, so that the two can be compared.

The paper's MPE fork pays every agent, every step, the same team reward: the sum over agents of
-(the landmarks' distances to their nearest agent, summed) - (that agent's collisions, counting its
collision with itself, so at least 1). PettingZoo's simple_spread_v3 (mpe2) pays each agent
0.5 x -(the same distance sum) + 0.5 x -(its collisions with others) (local_ratio 0.5). This plays
`--episodes` episodes with the checkpoint's policy (actions as the run's least exploring actor chooses
them: MAPPO samples, VDN is epsilon-greedy with that actor's epsilon) and prints both,
per agent and episode; `--random` plays uniformly random actions instead (the baseline).

    python benchmarks/mpe_paper_reward.py RUN_DIR [--episodes 200] [--random]

The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from srl_hpc import config
from srl_hpc.algorithm_spec import reads_global_state
from srl_hpc.algorithms.watching import watching_policy
from srl_hpc.envs.backends import make_env, spaces
from srl_hpc.models.building import build_model
from srl_hpc.rundir import RunDir


def paper_reward(world) -> float:
    """The fork's team reward of one step: sum over agents of -(distance sum) - (collisions, itself included)."""
    agents = world.agents
    positions = np.array([a.state.p_pos for a in agents])
    distances = sum(np.linalg.norm(positions - landmark.state.p_pos, axis=1).min() for landmark in world.landmarks)
    sizes = np.array([a.size for a in agents])
    apart = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    collisions = (apart < sizes[:, None] + sizes[None]).sum(1)  # the diagonal: each agent with itself
    return float(sum(-distances - c for c in collisions))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--random", action="store_true", help="uniformly random actions (the baseline)")
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    exp = config.load(run.experiment)
    model = build_model(exp, *spaces(exp.env, global_state=reads_global_state(exp.algorithm)))
    with_state = getattr(model, "state_size", 0) > 0  # MAPPO: the env's state after each agent's observation
    model.load_state_dict(torch.load(run.checkpoint, map_location="cpu")["model"])
    env = make_env(exp.env)
    act, explore = watching_policy(exp.algorithm, exp.workers.actor.count, greedy=False)  # as the least exploring actor
    explore = {k: torch.full((len(env.possible_agents),), v) for k, v in explore.items()}
    generator = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    own, paper = [], []
    for episode in range(args.episodes):
        observations, _ = env.reset(seed=10_000 + episode)
        names = list(env.possible_agents)
        totals, team = dict.fromkeys(names, 0.0), 0.0
        while env.agents:
            if args.random:
                actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
            else:
                obs = np.stack([observations[a] for a in names])
                if with_state:
                    obs = np.concatenate([obs, np.tile(env.state(), (len(names), 1))], 1)
                obs = torch.as_tensor(obs, dtype=torch.float32)
                with torch.no_grad():
                    chosen = act(model, obs, explore, generator)["actions"]
                actions = {a: int(chosen[k]) for k, a in enumerate(names) if a in env.agents}
            observations, rewards, _, _, _ = env.step(actions)
            for a, r in rewards.items():
                totals[a] += r
            team += paper_reward(env.unwrapped.world)
        own += list(totals.values())
        paper.append(team)
    env.close()
    policy = "random actions" if args.random else f"checkpoint version {torch.load(run.checkpoint)['version']}"
    print(
        f"{policy}, {args.episodes} episodes: env's return per agent {np.mean(own):.2f}; "
        f"the MAPPO paper's episode reward {np.mean(paper):.1f}"
    )
    print(
        json.dumps(
            {
                "run_dir": str(run.root),
                "random": args.random,
                "episodes": args.episodes,
                "return_per_agent": float(np.mean(own)),
                "paper_episode_reward": float(np.mean(paper)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
