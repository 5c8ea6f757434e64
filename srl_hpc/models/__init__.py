"""Models: a torso (mlp, nature_cnn, or a user's nn.Module by dotted path) under the head an algorithm
trains. Imported by policy and trainer handlers only (never by actors that do not run inference).

Heads (the algorithm's spec names one):
  actor_critic  forward(obs) -> (the policy's distribution parameters (B, width), state values (B,)): logits,
                masked where a Dict observation has an `action_mask`, or a Gaussian's means and log-stds
                (srl_hpc/models/distributions.py; `model.action_dist` turns them into the distribution)
  central_critic  forward(obs, state=None) -> as actor_critic, the value over every agent's observation (MAPPO)
  q             forward(obs) -> action values (B, A); dueling: value + centred advantages
With model.rnn, the actor-critic and q heads sit on a recurrent core (RecurrentActorCritic, RecurrentQ):
forward(obs, state) also takes and returns the recurrent state, and forward(obs, state, resets) unrolls
whole segments.
Observations come as they travel (srl_hpc/streams/contract.py): a Dict observation as packed bytes, which
ObsDecoder turns back into one tensor per key; DictTorso encodes each key (NatureCNN for images, an MLP
otherwise) and concatenates. With algorithm.normalize_observations the MLPs normalise their input by
running statistics the trainer keeps (srl_hpc/models/normalization.py).
A user's model is `package.module:Class`, built as Class(obs_space, action_space, **model.kwargs); it must
return what its algorithm's head returns (ObsDecoder(obs_space) reads a Dict observation).
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import gymnasium
import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import spec
from srl_hpc.dotted import load_object
from srl_hpc.envs.backends import agent_count, global_state_size
from srl_hpc.services.parameters import arrays_checksum
from srl_hpc.models.distributions import MASKED, ActionDistribution
from srl_hpc.models.normalization import RunningMeanStd
from srl_hpc.streams.contract import ACTION_MASK, ObsContract


def _init(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """Vector observations -> features (tanh layers).

    forward calls the layers' functions, not the modules: on a policy worker's CartPole batches each module
    call's own overhead (~2 us here) made up about a third of the model's forward pass."""

    def __init__(self, obs_dim: int, hidden_sizes: tuple[int, ...], normalize: bool = False):
        super().__init__()
        self.normalize = RunningMeanStd(obs_dim) if normalize else None
        layers, width = [], obs_dim
        for h in hidden_sizes:
            layers += [_init(nn.Linear(width, h), np.sqrt(2)), nn.Tanh()]
            width = h
        self.body = nn.Sequential(*layers)  # (the checkpoints' parameter names: body.0.weight, ...)
        self.linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        self.width = width

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        if self.normalize is not None:
            x = self.normalize(x.float())  # in fp32 whatever the model's precision
        x = x.to(self.linears[0].weight.dtype)  # (bf16 when an engine runs in bf16)
        for layer in self.linears:
            x = torch.tanh(nn.functional.linear(x, layer.weight, layer.bias))
        return x


class NatureCNN(nn.Module):
    """The DQN-Nature torso on uint8 stacked frames (C, 84, 84), scaled to [0, 1] inside.

    Convolutions run channels-last: on CPU (oneDNN) that made forward + backward ~1.4x faster here."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        c = obs_shape[0]
        self.conv = nn.Sequential(
            _init(nn.Conv2d(c, 32, 8, stride=4), np.sqrt(2)), nn.ReLU(),
            _init(nn.Conv2d(32, 64, 4, stride=2), np.sqrt(2)), nn.ReLU(),
            _init(nn.Conv2d(64, 64, 3, stride=1), np.sqrt(2)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            width = self.conv(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = nn.Sequential(_init(nn.Linear(width, 512), np.sqrt(2)), nn.ReLU())
        self.conv.to(memory_format=torch.channels_last)
        self.width = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # channels-last while still uint8; then the weights' dtype (bf16 when an engine runs the model in bf16)
        x = obs.contiguous(memory_format=torch.channels_last).to(self.fc[0].weight.dtype) / 255.0
        return self.fc(self.conv(x))


class PolicyHead(nn.Module):
    """Features -> the distribution parameters of `action_dist`: logits (masked by `mask`, where given), or
    a Gaussian's means beside a state-independent log-std per dimension (initially log_std_init)."""

    def __init__(self, width: int, action_dist: ActionDistribution, log_std_init: float = 0.0):
        super().__init__()
        self.gaussian = action_dist.gaussian
        self.logits = _init(nn.Linear(width, action_dist.dims if self.gaussian else action_dist.width), 0.01)
        self.log_std = nn.Parameter(torch.full((action_dist.dims,), float(log_std_init))) if self.gaussian else None

    def params(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(The heads call this rather than the module: a module call's own overhead is a few microseconds of
        a policy worker's small batch.)"""
        out = nn.functional.linear(x, self.logits.weight, self.logits.bias)
        if self.gaussian:
            return torch.cat([out, self.log_std.to(out.dtype).expand_as(out)], -1)
        return out if mask is None else out.masked_fill(mask == 0, MASKED)


class ObsDecoder(nn.Module):
    """Packed Dict observations (..., nbytes) uint8 -> key -> (..., *shape) tensors of each key's dtype
    (srl_hpc/streams/contract.py packs them); a Box observation passes through unchanged."""

    def __init__(self, obs_space: gymnasium.Space):
        super().__init__()
        contract = ObsContract(obs_space)
        self.fields = [(key, _torch_dtype(dtype), shape, offset, dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
                       for key, dtype, shape, offset in contract.fields]

    def forward(self, obs: torch.Tensor):
        if not self.fields:
            return obs
        lead = obs.shape[:-1]
        return {key: obs[..., offset:offset + size].clone(memory_format=torch.contiguous_format)
                .view(dtype).reshape(*lead, *shape)
                for key, dtype, shape, offset, size in self.fields}

    def mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The observation's action mask, if it has one."""
        for key, dtype, shape, offset, size in self.fields:
            if key == ACTION_MASK:
                return (obs[..., offset:offset + size].clone(memory_format=torch.contiguous_format)
                        .view(dtype).reshape(*obs.shape[:-1], *shape))
        return None


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


class OneHot(nn.Module):
    """A Discrete entry (an index) as n floats, one of them 1, for the MLP after it."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(index.long(), self.n).float()


class DictTorso(nn.Module):
    """A Dict observation: an encoder per key (NatureCNN for image keys, uint8 of 3 dimensions; an MLP
    otherwise, on a one-hot Discrete entry), their features concatenated. The action mask is not an input."""

    def __init__(self, obs_space: gymnasium.spaces.Dict, hidden_sizes: tuple[int, ...], normalize: bool):
        super().__init__()
        self.decode = ObsDecoder(obs_space)
        self.encoders = nn.ModuleDict()
        for key, sub in obs_space.spaces.items():
            if key == ACTION_MASK:
                continue
            if isinstance(sub, gymnasium.spaces.Discrete):
                self.encoders[key] = nn.Sequential(OneHot(int(sub.n)), MLP(int(sub.n), hidden_sizes))
                self.encoders[key].width = self.encoders[key][1].width
            elif sub.dtype == np.uint8 and len(sub.shape) == 3:  # an image
                self.encoders[key] = NatureCNN(tuple(sub.shape))
            else:
                self.encoders[key] = MLP(int(np.prod(sub.shape)), hidden_sizes, normalize)
        self.width = sum(e.width for e in self.encoders.values())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        fields = self.decode(obs)
        return torch.cat([encoder(fields[key]) for key, encoder in self.encoders.items()], -1)


class ActorCritic(nn.Module):
    """Policy parameters and state value over one shared torso, or (critic_torso) the value over its own."""

    def __init__(self, torso: nn.Module, action_dist: ActionDistribution, critic_torso: nn.Module | None = None,
                 decoder: ObsDecoder | None = None, log_std_init: float = 0.0):
        super().__init__()
        self.torso = torso
        self.critic_torso = critic_torso
        self.policy = PolicyHead(torso.width, action_dist, log_std_init)
        self.value = _init(nn.Linear((critic_torso or torso).width, 1), 1.0)
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

    def __init__(self, torso: nn.Module, kind: str, size: int):
        super().__init__()
        self.torso = torso
        self.lstm = kind == "lstm"
        self.core = (nn.LSTMCell if self.lstm else nn.GRUCell)(torso.width, size)
        self.state_size = 2 * size if self.lstm else size

    def _step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.lstm:
            h, c = self.core(x, tuple(state.chunk(2, -1)))
            return h, torch.cat([h, c], -1)
        h = self.core(x, state)
        return h, h

    def features(self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None):
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

    def __init__(self, torso: nn.Module, action_dist: ActionDistribution, kind: str, size: int,
                 decoder: ObsDecoder | None = None, log_std_init: float = 0.0):
        super().__init__(torso, kind, size)
        self.policy = PolicyHead(size, action_dist, log_std_init)
        self.value = _init(nn.Linear(size, 1), 1.0)
        self.decoder = decoder
        self.action_dist = action_dist

    def forward(self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None):
        out, state = self.features(obs, state, resets)
        mask = None if self.decoder is None else self.decoder.mask(obs)
        return self.policy.params(out, mask), self.value(out).squeeze(-1), state


class RecurrentQ(RecurrentCore):
    """The recurrent core -> action values (dueling as QHead): forward(...) -> (q, state). Replay-based
    training (recurrent DQN) unrolls stored sequences, after a burn-in that rebuilds their state."""

    def __init__(self, torso: nn.Module, n_actions: int, kind: str, size: int, dueling: bool):
        super().__init__(torso, kind, size)
        self.advantage = _init(nn.Linear(size, n_actions), 1.0)
        self.value = _init(nn.Linear(size, 1), 1.0) if dueling else None

    def forward(self, obs: torch.Tensor, state: torch.Tensor, resets: torch.Tensor | None = None):
        out, state = self.features(obs, state, resets)
        return q_values(out, self.advantage, self.value), state


class CentralisedActorCritic(nn.Module):
    """MAPPO's networks for a multi-agent env: each agent's policy reads its own observation, the value reads
    the env's global state: the env's own (`state_size` floats at the end of every row's observation, where
    the env has a state(): srl_hpc/envs/agents.py), or else its `agents` agents' observations side by side.
    Rows come env-major, so a batch of whole envs, as every inference request is, carries those; trainers
    pass them in (`state`), as their minibatches mix rows."""

    def __init__(self, torso: nn.Module, critic_torso: nn.Module, n_actions: int, agents: int, state_size: int = 0):
        super().__init__()
        self.torso, self.critic_torso, self.agents, self.state_size = torso, critic_torso, agents, state_size
        self.logits = _init(nn.Linear(torso.width, n_actions), 0.01)
        self.value = _init(nn.Linear(critic_torso.width, 1), 1.0)

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.state_size:
            obs, state = obs[..., :-self.state_size], obs[..., -self.state_size:]
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

    def __init__(self, torso: nn.Module, n_actions: int, dueling: bool):
        super().__init__()
        self.torso = torso
        self.advantage = _init(nn.Linear(torso.width, n_actions), 1.0)
        self.value = _init(nn.Linear(torso.width, 1), 1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return q_values(self.torso(obs), self.advantage, self.value)


def q_values(x: torch.Tensor, advantage: nn.Module, value: nn.Module | None) -> torch.Tensor:
    """Action values from features: the advantages, or (dueling) V(s) + A(s, a) - mean_a A(s, a)."""
    a = advantage(x)
    if value is None:
        return a
    return value(x) + a - a.mean(-1, keepdim=True)


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
        raise ValueError(f"the {head} head needs Discrete actions and Box observations: the env has {action_space} "
                         f"and {obs_space}")

    def torso():
        if dict_obs:
            return DictTorso(obs_space, cfg.hidden_sizes, normalize)
        if cfg.name == "mlp":
            return MLP(int(np.prod(obs_space.shape)), cfg.hidden_sizes, normalize)
        return NatureCNN(tuple(obs_space.shape))

    decoder = ObsDecoder(obs_space) if dict_obs and ACTION_MASK in obs_space.spaces else None
    n_actions = action_dist.width
    if head == "central_critic":
        agents = agent_count(exp.env, exp.policies, policy)
        if agents < 2:
            raise ValueError(f"{exp.algorithm.name} needs a multi-agent env: env.id {exp.env.id!r} has one agent "
                             "(algorithm.name: ppo trains it)")
        if cfg.name != "mlp":
            raise ValueError(f"{exp.algorithm.name} needs model.name mlp (its value reads the agents' vector "
                             f"observations side by side), got {cfg.name!r}")
        state_size = global_state_size(exp.env)  # the env's own state, at the end of each row's observation
        own = int(np.prod(obs_space.shape)) - state_size
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


GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")  # what says which GPUs a task sees


def pick_gpu(worker: str, gpu_index: int, visible: int, may_share: bool, env: Mapping[str, str],
             no_gpu: str = "") -> int:
    """Which of the `visible` GPUs its task sees a worker on device 'cuda' takes. `gpu_index`, its index
    among its node's CUDA workers (srl_hpc.graph.Graph.gpu_index), is right where the task sees the node's
    whole set; with --gpus-per-task or ConstrainDevices=yes a task sees only its own GPU, as device 0. Seeing
    fewer than its index needs, workers share them round-robin only if `may_share` (local mode,
    slurm.<group>.share_gpu): else two would meet on one GPU unasked. `env` is quoted in errors; `no_gpu`:
    torch's word on why it sees none."""
    seen = ", ".join(f"{name}={env.get(name, 'unset')}" for name in GPU_VARIABLES)
    if visible == 0:
        raise RuntimeError(f"{worker} is on device cuda, but its task sees no GPU"
                           f"{': ' + no_gpu if no_gpu else ''} ({seen})")
    if visible == 1:
        return 0
    if gpu_index < visible or may_share:
        return gpu_index % visible
    raise RuntimeError(f"{worker} is CUDA worker {gpu_index} of its node, which shows {visible} GPU(s) to its "
                       f"task ({seen}); set the group's slurm gpus_per_node, or share_gpu: true to let workers "
                       f"share one")


def resolve_device(device: str, gpu_index: int, may_share: bool, worker: str) -> torch.device:
    """'cuda' means the GPU pick_gpu picks among those this task sees; any other device is taken as named."""
    if device != "cuda":
        return torch.device(device)
    visible, no_gpu = torch.cuda.device_count(), ""
    if visible == 0:
        try:
            torch.cuda.init()
        except (AssertionError, RuntimeError) as e:  # torch's reason: no CUDA build, no driver, no GPU
            no_gpu = str(e)
    return torch.device("cuda", pick_gpu(worker, gpu_index, visible, may_share, os.environ, no_gpu))


def state_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """Weights as numpy copies (a copy: the optimizer keeps changing the tensors in place)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def parameter_checksum(model: nn.Module) -> int:
    """A 63-bit digest of every weight's bytes: equal on two data-parallel trainers only if they hold
    bit-identical parameters."""
    return arrays_checksum(state_arrays(model))


def load_arrays(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
