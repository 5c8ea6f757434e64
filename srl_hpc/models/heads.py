"""The heads an algorithm trains on a torso (its spec names one: actor_critic, central_critic, q), and their
recurrent forms."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from srl_hpc.models.distributions import MASKED, ActionDistribution
from srl_hpc.models.torsos import ObsDecoder, init_layer


class PolicyHead(nn.Module):
    """Features -> the distribution parameters of `action_dist`: logits (masked by `mask`, where given), or
    a Gaussian's means beside a state-independent log-std per dimension (initially log_std_init)."""

    def __init__(self, width: int, action_dist: ActionDistribution, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.gaussian = action_dist.gaussian
        self.logits = init_layer(nn.Linear(width, action_dist.dims if self.gaussian else action_dist.width), 0.01)
        self.log_std = nn.Parameter(torch.full((action_dist.dims,), float(log_std_init))) if self.gaussian else None

    def params(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(The heads call this rather than the module: a module call's own overhead is a few microseconds of
        a policy worker's small batch.)"""
        out = nn.functional.linear(x, self.logits.weight, cast(torch.Tensor, self.logits.bias))
        if self.gaussian:
            assert self.log_std is not None  # (a Gaussian's)
            return torch.cat([out, self.log_std.to(out.dtype).expand_as(out)], -1)
        return out if mask is None else out.masked_fill(mask == 0, MASKED)


class ActorCritic(nn.Module):
    """Policy parameters and state value over one shared torso, or (critic_torso) the value over its own."""

    def __init__(
        self,
        torso: nn.Module,
        action_dist: ActionDistribution,
        critic_torso: nn.Module | None = None,
        decoder: ObsDecoder | None = None,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.torso = torso
        self.critic_torso = critic_torso
        self.policy = PolicyHead(cast(int, torso.width), action_dist, log_std_init)
        self.value = init_layer(nn.Linear(cast(int, (critic_torso or torso).width), 1), 1.0)
        self.decoder = decoder  # reads the action mask of a Dict observation
        self.action_dist = action_dist

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.torso(obs)
        v = x if self.critic_torso is None else self.critic_torso(obs)
        mask = None if self.decoder is None else self.decoder.mask(obs)
        return self.policy.params(x, mask), self.value(v).squeeze(-1)


class RecurrentCore(nn.Module):
    """Torso -> GRU or LSTM cell, for tasks one observation does not tell; the recurrent heads sit on it.

    The state is (B, state_size) floats (an LSTM's hidden and cell side by side). Actors keep it and send it
    with every request, so any policy worker can answer any request and a replaced one loses nothing.
    features(obs, state) takes one step; features(obs, state, resets) unrolls segments (N, T, ...) from the
    state their first step was chosen with, zeroing it before the steps marked in resets (an episode's
    first, as actors do): truncated back-propagation through the segment."""

    def __init__(self, torso: nn.Module, kind: str, size: int) -> None:
        super().__init__()
        self.torso = torso
        self.lstm = kind == "lstm"
        self.core = (nn.LSTMCell if self.lstm else nn.GRUCell)(cast(int, torso.width), size)
        self.state_size = 2 * size if self.lstm else size

    def _step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.lstm:
            h, c = self.core(x, tuple(state.chunk(2, -1)))
            return h, torch.cat([h, c], -1)
        h = self.core(x, state)
        return h, h

    def features(
        self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(core output (B, size) or (N, T, size), the state after the last step)."""
        state = state.to(self.core.weight_hh.dtype)
        if resets is None:
            return self._step(self.torso(obs), state)
        n, t = resets.shape
        x = self.torso(obs.flatten(0, 1)).unflatten(0, (n, t))
        keep = (~resets).unsqueeze(-1).to(state.dtype)
        outs = []
        for i in range(t):
            out, state = self._step(x[:, i], state * keep[:, i])
            outs.append(out)
        return torch.stack(outs, 1), state


class RecurrentActorCritic(RecurrentCore):
    """The recurrent core -> policy parameters and state value: forward(...) -> (params, values, state)."""

    def __init__(
        self,
        torso: nn.Module,
        action_dist: ActionDistribution,
        kind: str,
        size: int,
        decoder: ObsDecoder | None = None,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__(torso, kind, size)
        self.policy = PolicyHead(size, action_dist, log_std_init)
        self.value = init_layer(nn.Linear(size, 1), 1.0)
        self.decoder = decoder
        self.action_dist = action_dist

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, state = self.features(obs, state, resets)
        mask = None if self.decoder is None else self.decoder.mask(obs)
        return self.policy.params(out, mask), self.value(out).squeeze(-1), state


class RecurrentQ(RecurrentCore):
    """The recurrent core -> action values (dueling as QHead): forward(...) -> (q, state). Replay-based
    training (recurrent DQN) unrolls stored sequences, after a burn-in that rebuilds their state."""

    def __init__(self, torso: nn.Module, n_actions: int, kind: str, size: int, dueling: bool) -> None:
        super().__init__(torso, kind, size)
        self.advantage = init_layer(nn.Linear(size, n_actions), 1.0)
        self.value = init_layer(nn.Linear(size, 1), 1.0) if dueling else None

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, state = self.features(obs, state, resets)
        return q_values(out, self.advantage, self.value), state


class CentralisedActorCritic(nn.Module):
    """MAPPO's networks for a multi-agent env: each agent's policy reads its own observation, the value reads
    the env's global state: the env's own (`state_size` floats at the end of every row's observation, where
    the env has a state(): srl_hpc/envs/agents.py), or else its `agents` agents' observations side by side.
    Rows come env-major, so a batch of whole envs, as every inference request is, carries those; trainers
    pass them in (`state`), as their minibatches mix rows."""

    def __init__(
        self, torso: nn.Module, critic_torso: nn.Module, n_actions: int, agents: int, state_size: int = 0
    ) -> None:
        super().__init__()
        self.torso, self.critic_torso, self.agents, self.state_size = torso, critic_torso, agents, state_size
        self.logits = init_layer(nn.Linear(cast(int, torso.width), n_actions), 0.01)
        self.value = init_layer(nn.Linear(cast(int, critic_torso.width), 1), 1.0)

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.state_size:
            obs, state = obs[..., : -self.state_size], obs[..., -self.state_size :]
        elif state is None:
            state = global_state(obs, self.agents)
        return self.logits(self.torso(obs)), self.value(self.critic_torso(state)).squeeze(-1)


def global_state(obs: torch.Tensor, agents: int) -> torch.Tensor:
    """Rows (B, ...) of whole envs, env-major -> (B, agents * features): each row's env's observations side by side."""
    if len(obs) % agents:
        raise ValueError(f"{len(obs)} rows are not whole envs of {agents} agents")
    flat = obs.flatten(1)
    return flat.reshape(-1, agents * flat.shape[1]).repeat_interleave(agents, 0)


class QHead(nn.Module):
    """Action values; dueling: V(s) + A(s, a) - mean_a A(s, a)."""

    def __init__(self, torso: nn.Module, n_actions: int, dueling: bool) -> None:
        super().__init__()
        self.torso = torso
        self.advantage = init_layer(nn.Linear(cast(int, torso.width), n_actions), 1.0)
        self.value = init_layer(nn.Linear(cast(int, torso.width), 1), 1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return q_values(self.torso(obs), self.advantage, self.value)


def q_values(x: torch.Tensor, advantage: nn.Module, value: nn.Module | None) -> torch.Tensor:
    """Action values from features: the advantages, or (dueling) V(s) + A(s, a) - mean_a A(s, a)."""
    a = advantage(x)
    if value is None:
        return a
    return value(x) + a - a.mean(-1, keepdim=True)
