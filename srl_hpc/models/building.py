"""build_model: an experiment's model for one policy, from its env's spaces, its algorithm's head and
`model` section (a built-in torso, or a user's nn.Module by dotted path)."""

from __future__ import annotations

from typing import cast

import gymnasium
import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import spec
from srl_hpc.dotted import load_object
from srl_hpc.envs.backends import agent_count, global_state_size
from srl_hpc.models.distributions import ActionDistribution
from srl_hpc.models.heads import ActorCritic, CentralisedActorCritic, QHead, RecurrentActorCritic, RecurrentQ
from srl_hpc.models.torsos import MLP, DictTorso, NatureCNN, ObsDecoder
from srl_hpc.streams.contract import ACTION_MASK


def build_model(exp, obs_space: gymnasium.Space, action_space: gymnasium.Space, policy: str = "") -> nn.Module:
    """The experiment's model (of `policy`, with several) under its algorithm's head, with `action_dist` (its
    head's distribution). The same seed gives the same initial weights in the trainer and in every policy
    handler."""
    cfg, head = exp.model, spec(exp.algorithm).head
    dueling = spec(exp.algorithm).dueling(exp.algorithm)  # a q head's
    action_dist = ActionDistribution(action_space)
    normalize = bool(getattr(exp.algorithm, "normalize_observations", False))
    dict_obs = isinstance(obs_space, gymnasium.spaces.Dict)
    torch.manual_seed(exp.seed)
    if ":" in cfg.name:
        model = load_object(cfg.name)(obs_space, action_space, **cfg.kwargs)
        model.action_dist = action_dist
        return model
    if head != "actor_critic" and (action_dist.kind != "Discrete" or dict_obs):
        raise ValueError(
            f"the {head} head needs Discrete actions and Box observations: the env has {action_space} and {obs_space}"
        )

    def torso() -> DictTorso | MLP | NatureCNN:
        if dict_obs:
            return DictTorso(cast(gymnasium.spaces.Dict, obs_space), cfg.hidden_sizes, normalize)
        if cfg.name == "mlp":
            return MLP(int(np.prod(cast(tuple[int, ...], obs_space.shape))), cfg.hidden_sizes, normalize)
        return NatureCNN(tuple(cast(tuple[int, ...], obs_space.shape)))

    decoder = (
        ObsDecoder(obs_space) if dict_obs and ACTION_MASK in cast(gymnasium.spaces.Dict, obs_space).spaces else None
    )
    n_actions = action_dist.width
    if head == "central_critic":
        agents = agent_count(exp.env, exp.policies, policy)
        if agents < 2:
            raise ValueError(
                f"{exp.algorithm.name} needs a multi-agent env: env.id {exp.env.id!r} has one agent "
                "(algorithm.name: ppo trains it)"
            )
        if cfg.name != "mlp":
            raise ValueError(
                f"{exp.algorithm.name} needs model.name mlp (its value reads the agents' vector "
                f"observations side by side), got {cfg.name!r}"
            )
        state_size = global_state_size(exp.env)  # the env's own state, at the end of each row's observation
        own = int(np.prod(cast(tuple[int, ...], obs_space.shape))) - state_size
        critic = MLP(state_size or agents * own, cfg.hidden_sizes)
        model = CentralisedActorCritic(MLP(own, cfg.hidden_sizes), critic, n_actions, agents, state_size)
    elif head == "actor_critic" and cfg.rnn != "none":
        model = RecurrentActorCritic(torso(), action_dist, cfg.rnn, cfg.rnn_size, decoder, cfg.log_std_init)
    elif head == "actor_critic":
        model = ActorCritic(torso(), action_dist, torso() if cfg.separate_critic else None, decoder, cfg.log_std_init)
    elif cfg.rnn != "none":
        model = RecurrentQ(torso(), n_actions, cfg.rnn, cfg.rnn_size, dueling=dueling)
    else:
        model = QHead(torso(), n_actions, dueling=dueling)
    model.action_dist = action_dist
    return model
