"""Action distributions (srl_hpc/models/distributions.py) against torch.distributions, masks, and the
running statistics of observation normalisation and reward scaling (srl_hpc/models/normalization.py)."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from srl_hpc.models.distributions import MASKED, ActionDistribution
from srl_hpc.models.normalization import ReturnScale, RunningMeanStd, collecting, moments


def test_categorical_log_probs_entropy_and_sampling_match_torch():
    logits = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    dist, ref = ActionDistribution(spaces.Discrete(5))(logits), torch.distributions.Categorical(logits=logits)
    actions = dist.sample(torch.Generator().manual_seed(1))
    assert torch.allclose(dist.log_prob(actions), ref.log_prob(actions), atol=1e-6)
    again, logp = dist.sample_with_log_prob(torch.Generator().manual_seed(1))  # the policy worker's one pass
    assert torch.equal(again, actions) and torch.allclose(logp, ref.log_prob(actions), atol=1e-6)
    assert torch.allclose(dist.entropy(), ref.entropy(), atol=1e-6)
    assert torch.equal(dist.mode(), logits.argmax(-1))


def test_multi_categorical_is_the_product_of_its_heads():
    nvec = (3, 2, 4)
    logits = torch.randn(32, sum(nvec), generator=torch.Generator().manual_seed(0))
    dist = ActionDistribution(spaces.MultiDiscrete(nvec))(logits)
    heads = [torch.distributions.Categorical(logits=part) for part in logits.split(nvec, -1)]
    actions = dist.sample(torch.Generator().manual_seed(2))
    assert actions.shape == (32, 3) and all((actions[:, i] < n).all() for i, n in enumerate(nvec))
    expected = sum(head.log_prob(actions[:, i]) for i, head in enumerate(heads))
    assert torch.allclose(dist.log_prob(actions), expected, atol=1e-6)
    assert torch.allclose(dist.entropy(), sum(head.entropy() for head in heads), atol=1e-6)


def test_diagonal_gaussian_matches_torch_normal_summed_over_dimensions():
    mean = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    log_std = torch.tensor([-1.0, 0.0, 0.5])
    dist = ActionDistribution(spaces.Box(-1, 1, (3,)))(torch.cat([mean, log_std.expand_as(mean)], -1))
    ref = torch.distributions.Normal(mean, log_std.exp())
    actions = dist.sample(torch.Generator().manual_seed(3))
    assert torch.allclose(dist.log_prob(actions), ref.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(dist.entropy(), ref.entropy().sum(-1), atol=1e-6)
    assert torch.equal(dist.mode(), mean)
    many = ActionDistribution(spaces.Box(-1, 1, (3,)))(torch.cat([mean[:1], log_std[None]], -1).expand(20_000, 6))
    draws = many.sample(torch.Generator().manual_seed(4))
    assert torch.allclose(draws.std(0), log_std.exp(), rtol=0.03)  # (3 sd of a std estimate: ~1.5%)


def test_masked_actions_are_never_sampled_and_carry_no_entropy():
    logits = torch.zeros(50_000, 4)
    mask = torch.tensor([1, 0, 1, 0]).expand(50_000, 4)
    dist = ActionDistribution(spaces.Discrete(4))(logits.masked_fill(mask == 0, MASKED))
    actions = dist.sample(torch.Generator().manual_seed(0))
    counts = torch.bincount(actions, minlength=4)
    assert counts[1] == counts[3] == 0 and abs(counts[0] / 50_000 - 0.5) < 0.01
    assert torch.allclose(dist.entropy(), torch.full((50_000,), float(np.log(2))))
    assert torch.isfinite(dist.entropy()).all()


def test_statistics_merged_batch_by_batch_and_across_actors_equal_those_of_all_the_data():
    rng = np.random.default_rng(0)
    parts = [
        rng.normal(loc, scale, size=(n, 3)) for loc, scale, n in ((5, 2, 100), (-3, 0.5, 7), (0, 10, 1000), (1, 1, 1))
    ]
    stats = RunningMeanStd(3)
    for part in parts:  # as batches reach the trainer, from different actors
        stats.merge(moments(torch.from_numpy(part)))
    everything = np.concatenate(parts)
    assert stats.count.item() == len(everything)
    assert np.allclose(stats.mean.numpy(), everything.mean(0)) and np.allclose(stats.var.numpy(), everything.var(0))
    grouped = RunningMeanStd(3)  # another grouping (two trainers' batches summed first) gives the same
    grouped.merge(
        moments(torch.from_numpy(np.concatenate(parts[:2]))) + moments(torch.from_numpy(np.concatenate(parts[2:])))
    )
    assert np.allclose(grouped.mean.numpy(), stats.mean.numpy()) and np.allclose(grouped.var.numpy(), stats.var.numpy())


def test_normalisation_collects_only_when_asked_and_then_normalises():
    stats = RunningMeanStd(2)
    x = torch.tensor([[1.0, 4.0], [3.0, 8.0]])
    assert torch.equal(stats(x), x)  # nothing collected yet: mean 0, var 1 (and within the clip)
    with collecting(stats) as found:
        stats(x)
    assert found and stats.count.item() == 2
    assert torch.allclose(stats(x), torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-6)


def test_rewards_are_scaled_by_the_deviation_of_the_discounted_return_and_clipped():
    scale = ReturnScale()
    returns = torch.tensor([-10.0, -30.0, -50.0, -70.0])  # standard deviation sqrt(500)
    scale.update(moments(returns))
    assert scale.scale(np.array([-np.sqrt(500.0)]))[0] == pytest.approx(-1.0)
    assert scale.scale(np.array([-1e6]))[0] == -10.0


@pytest.mark.parametrize("bf16", [False, True])
def test_a_policy_workers_engine_keeps_the_published_statistics_exact_in_any_precision(bf16):
    from conftest import ROOT
    from srl_hpc import config
    from srl_hpc.algorithms import ppo
    from srl_hpc.envs.backends import spaces
    from srl_hpc.handlers.policy import InferenceEngine
    from srl_hpc.models.building import build_model
    from srl_hpc.models.weights import load_arrays, state_arrays

    exp = config.load(ROOT / "experiments" / "pendulum_ppo.yaml")
    trained = build_model(exp, *spaces(exp.env))
    batch = torch.tensor([[1000.1, -3.0, 0.5], [1000.3, 5.0, 0.25]], dtype=torch.float64)
    trained.torso.normalize.merge(moments(batch))
    engine = InferenceEngine(build_model(exp, *spaces(exp.env)), ppo.act, torch.device("cpu"), seed=0, bf16=bf16)
    load_arrays(engine.model, state_arrays(trained))  # as a policy worker loads what the trainer published
    for name in ("mean", "var", "count"):
        ours, theirs = getattr(engine.model.torso.normalize, name), getattr(trained.torso.normalize, name)
        assert ours.dtype == torch.float64 and torch.equal(ours, theirs), name
