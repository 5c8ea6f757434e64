"""GAE against hand-computed values, and the PPO loss pieces."""

import gymnasium
import numpy as np
import pytest
import torch

from srl_hpc.algorithms.ppo import PPO, gae, ppo_losses
from srl_hpc.config import PPOConfig as AlgorithmConfig
from srl_hpc.models.distributions import ActionDistribution


def test_gae_hand_computed_no_episode_end():
    # gamma 0.5, lambda 0.5: delta_t = r + 0.5 * V(s_{t+1}) - V(s_t)
    r, v, nv = [[1.0, 2.0]], [[0.5, 1.0]], [[1.0, 4.0]]
    adv, ret = gae(r, v, nv, [[False, False]], gamma=0.5, lam=0.5)
    d1 = 2.0 + 0.5 * 4.0 - 1.0  # 3.0
    d0 = 1.0 + 0.5 * 1.0 - 0.5  # 1.0
    assert adv[0] == pytest.approx([d0 + 0.25 * d1, d1])  # [1.75, 3.0]
    assert ret[0] == pytest.approx([1.75 + 0.5, 3.0 + 1.0])


def test_gae_stops_at_episode_end_and_uses_given_bootstrap():
    # step 0 terminates (next value 0); step 1 starts a new episode and is truncated (bootstrap 10)
    r, v, nv, done = [[1.0, 1.0, 0.0]], [[2.0, 3.0, 1.0]], [[0.0, 10.0, 5.0]], [[True, True, False]]
    adv, _ = gae(r, v, nv, done, gamma=0.9, lam=0.8)
    assert adv[0, 0] == pytest.approx(1.0 - 2.0)  # no leakage from step 1
    assert adv[0, 1] == pytest.approx(1.0 + 0.9 * 10.0 - 3.0)  # truncation bootstraps, no leakage from step 2
    assert adv[0, 2] == pytest.approx(0.0 + 0.9 * 5.0 - 1.0)


def test_gae_rows_are_independent():
    rng = np.random.default_rng(0)
    r, v, nv = rng.normal(size=(3, 5)), rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    done = rng.random((3, 5)) < 0.3
    adv, _ = gae(r, v, nv, done, 0.99, 0.95)
    for i in range(3):
        row, _ = gae(r[i : i + 1], v[i : i + 1], nv[i : i + 1], done[i : i + 1], 0.99, 0.95)
        assert adv[i] == pytest.approx(row[0], rel=1e-5)


def test_policy_loss_is_clipped():
    adv = torch.tensor([1.0, -1.0])
    old = torch.zeros(2)
    new = torch.log(torch.tensor([1.5, 0.5]))  # ratios 1.5 and 0.5, both outside [0.8, 1.2]
    out = ppo_losses(new, old, adv, torch.zeros(2), torch.zeros(2), torch.zeros(2), clip_coef=0.2)
    # positive advantage: min(1.5, 1.2) * 1 -> 1.2 ; negative: max(0.5, 0.8) * -1 -> -0.8 ; loss = -mean
    assert out["policy_loss"].item() == pytest.approx(-(1.2 - 0.8) / 2)
    assert out["clip_fraction"].item() == 1.0


def test_policy_loss_unclipped_inside_range():
    adv = torch.tensor([2.0])
    new, old = torch.log(torch.tensor([1.1])), torch.zeros(1)
    out = ppo_losses(new, old, adv, torch.zeros(1), torch.zeros(1), torch.zeros(1), clip_coef=0.2)
    assert out["policy_loss"].item() == pytest.approx(-2.2)
    assert out["approx_kl"].item() == pytest.approx(0.1 - np.log(1.1), abs=1e-6)


def test_value_loss_and_entropy_match_their_formulas():
    out = ppo_losses(
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2),
        torch.tensor([1.0, 3.0]),
        torch.tensor([0.0, 0.0]),
        torch.tensor([0.5, 1.5]),
        clip_coef=0.2,
    )
    assert out["value_loss"].item() == pytest.approx(0.5 * (1 + 9) / 2)
    assert out["entropy"].item() == pytest.approx(1.0)


def test_update_moves_policy_towards_advantaged_action():
    torch.manual_seed(0)
    model = torch.nn.Sequential()

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.zeros(2))
            self.v = torch.nn.Parameter(torch.zeros(1))

        def forward(self, obs):
            n = obs.shape[0]
            return self.logits.expand(n, 2), self.v.expand(n)

    model = Tiny()
    model.action_dist = ActionDistribution(gymnasium.spaces.Discrete(2))
    cfg = AlgorithmConfig(lr=0.05, epochs=4, minibatches=2, entropy_coef=0.0)
    ppo = PPO(model, cfg, torch.device("cpu"))
    n = 64
    seg = {
        "obs": np.zeros((1, n, 1), np.float32),
        "actions": np.tile([0, 1], n // 2)[None],
        "logp": np.full((1, n), np.log(0.5), np.float32),
        "values": np.zeros((1, n), np.float32),
        "next_values": np.zeros((1, n), np.float32),
        "rewards": np.tile([1.0, -1.0], n // 2)[None].astype(np.float32),
        "dones": np.ones((1, n), bool),
        "valid": np.ones((1, n), bool),
    }
    stats, _ = ppo.update(ppo.prepare(seg), frames_done=0)
    probs = torch.softmax(model.logits, 0)
    assert probs[0] > 0.55  # action 0 was rewarded
    assert set(stats) >= {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "lr"}


def test_prepare_leaves_out_auto_reset_steps_after_gae():
    # row 0: step 1 ends the episode, step 2 is the env's auto-reset (invalid), step 3 starts the next one
    seg = {
        "obs": np.arange(4, dtype=np.float32).reshape(1, 4, 1),
        "actions": np.zeros((1, 4), np.int64),
        "logp": np.zeros((1, 4), np.float32),
        "values": np.zeros((1, 4), np.float32),
        "next_values": np.zeros((1, 4), np.float32),
        "rewards": np.array([[1.0, 1.0, 100.0, 1.0]], np.float32),
        "dones": np.array([[False, True, False, False]]),
        "valid": np.array([[True, True, False, True]]),
    }
    model = torch.nn.Linear(1, 2)
    model.action_dist = ActionDistribution(gymnasium.spaces.Discrete(2))
    ppo = PPO(model, AlgorithmConfig(gamma=1.0, gae_lambda=1.0), torch.device("cpu"))
    batch = ppo.prepare(seg)
    assert batch["obs"][:, 0].tolist() == [0.0, 1.0, 3.0]
    assert batch["advantages"].tolist() == [2.0, 1.0, 1.0]  # the invalid step's reward reaches nothing


@pytest.mark.parametrize("bf16", [False, True])
def test_update_moves_policy_towards_advantaged_action_in_both_precisions(bf16):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 3))  # logits of 2 actions + a value, from a constant input

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, obs):
            out = self.net(obs.float())
            return out[:, :2], out[:, 2]

    heads = Heads()
    heads.action_dist = ActionDistribution(gymnasium.spaces.Discrete(2))
    forward_dtypes = set()  # what the update's forward passes computed in: bf16 only under autocast
    model.register_forward_hook(lambda module, args, out: forward_dtypes.add(out.dtype))
    ppo = PPO(
        heads, AlgorithmConfig(lr=0.05, epochs=4, minibatches=2, entropy_coef=0.0), torch.device("cpu"), bf16=bf16
    )
    n = 64
    seg = {
        "obs": np.ones((1, n, 1), np.float32),
        "actions": np.tile([0, 1], n // 2)[None],
        "logp": np.full((1, n), np.log(0.5), np.float32),
        "values": np.zeros((1, n), np.float32),
        "next_values": np.zeros((1, n), np.float32),
        "rewards": np.tile([1.0, -1.0], n // 2)[None].astype(np.float32),
        "dones": np.ones((1, n), bool),
        "valid": np.ones((1, n), bool),
    }
    ppo.update(ppo.prepare(seg), frames_done=0)
    assert forward_dtypes == {torch.bfloat16 if bf16 else torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # weights stay fp32 in both
    with torch.no_grad():
        probs = torch.softmax(heads(torch.ones(1, 1))[0], -1)[0]
    assert probs[0] > 0.55  # action 0 was rewarded


def test_a_separate_critic_keeps_the_value_loss_out_of_the_policys_torso():
    import gymnasium

    from srl_hpc import config
    from srl_hpc.models.building import build_model

    obs_space, actions = gymnasium.spaces.Box(-1, 1, (6,)), gymnasium.spaces.Discrete(3)
    obs = torch.randn(32, 6)
    for separate in (False, True):
        exp = config.loads(
            f"env: {{id: Acrobot-v1}}\nmodel: {{separate_critic: {str(separate).lower()}}}\nstop: {{wall_time: 1}}\n"
        )
        model = build_model(exp, obs_space, actions)
        _, values = model(obs)
        (values - 100.0).pow(2).mean().backward()  # a large value error, as Acrobot's -500 returns make
        torso_grad = sum(p.grad.abs().sum().item() for p in model.torso.parameters() if p.grad is not None)
        assert (torso_grad == 0.0) == separate, separate
