"""DQN: n-step double-Q targets, the importance-weighted loss, Ape-X exploration, and the config rules."""

import numpy as np
import pytest
import torch

from srl_hpc import config
from srl_hpc.algorithms import dqn
from srl_hpc.models.heads import QHead
from srl_hpc.models.torsos import MLP


class Fixed(torch.nn.Module):
    """Q-values given per observation index: obs[:, 0] selects a row of `table`."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.tensor(table, dtype=torch.float32)

    def forward(self, obs):
        return self.table[obs[:, 0].long()]


def test_double_q_takes_the_online_argmax_valued_by_the_target_net():
    online = Fixed([[0.0, 5.0, 1.0]])  # online prefers action 1
    target = Fixed([[10.0, 2.0, 7.0]])  # target alone would take action 0 (10)
    next_obs = torch.zeros(2, 1)
    returns, discounts = torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.0])  # gamma^m; 0 after a termination
    double = dqn.td_targets(online, target, next_obs, returns, discounts, double=True)
    single = dqn.td_targets(online, target, next_obs, returns, discounts, double=False)
    assert double.tolist() == [1.0 + 0.5 * 2.0, 1.0]
    assert single.tolist() == [1.0 + 0.5 * 10.0, 1.0]


def test_loss_weights_each_transition_and_returns_its_td_error():
    q = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    targets = torch.tensor([1.5, 0.0, 3.0])
    loss, td = dqn.dqn_loss(q, targets, torch.tensor([1.0, 0.5, 1.0]))
    assert td.tolist() == [0.5, -2.0, 0.0]
    huber = [0.5 * 0.5**2, 2.0 - 0.5, 0.0]  # quadratic below 1, linear above
    assert loss.item() == pytest.approx((huber[0] + 0.5 * huber[1] + huber[2]) / 3)
    loss.backward()
    assert q.grad[2] == 0 and q.grad[0] < 0 < q.grad[1]  # moves q towards the targets


def test_act_explores_at_each_rows_epsilon():
    model = Fixed([[0.0, 1.0, 0.0, 0.0]])  # greedy action: 1
    obs = torch.zeros(20_000, 1)
    eps = torch.tensor([0.0] * 10_000 + [0.5] * 10_000)
    actions = dqn.act(model, obs, {"epsilon": eps}, torch.Generator().manual_seed(0))["actions"].numpy()
    assert (actions[:10_000] == 1).all()
    non_greedy = (actions[10_000:] != 1).mean()  # a random action is non-greedy 3/4 of the time
    assert non_greedy == pytest.approx(0.5 * 0.75, abs=0.02)


@pytest.mark.slow
def test_update_learns_a_one_step_bandit_and_reports_priorities():
    torch.manual_seed(0)
    model = QHead(MLP(2, (16,)), 2, dueling=True)
    cfg = config.DQNConfig(lr=1e-2, target_update_interval=1)
    agent = dqn.DQN(model, cfg, torch.device("cpu"))
    index = np.arange(64) % 2
    obs = np.eye(2, dtype=np.float32)[index]
    actions = np.arange(64) // 2 % 2
    returns = np.where(index == actions, 1.0, -1.0).astype(np.float32)  # taking the observed index pays 1
    batch = {
        "obs": obs,
        "actions": actions,
        "returns": returns,
        "next_obs": obs,
        "discounts": np.zeros(64, np.float32),
        "weights": np.ones(64, np.float32),
    }
    for _ in range(200):
        stats, feedback = agent.update(agent.prepare(batch), 0)
    q = model(torch.eye(2)).detach()
    assert q[0, 0] > q[0, 1] and q[1, 1] > q[1, 0]
    assert feedback["priorities"].shape == (64,) and (feedback["priorities"] >= 0).all()
    assert stats["td_abs_mean"] < 0.1


def test_apex_epsilons_span_from_epsilon_down():
    cfg = config.DQNConfig(epsilon=0.4, epsilon_alpha=7)
    eps = [cfg.actor_epsilon(i, 8) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps == sorted(eps, reverse=True)


def test_dqn_needs_a_buffer_and_ppo_refuses_one():
    with pytest.raises(config.ConfigError, match="workers.buffer.count: dqn needs at least one buffer worker"):
        config.loads("algorithm: {name: dqn}\nstop: {wall_time: 1}\n")
    with pytest.raises(config.ConfigError, match="workers.buffer.count: ppo is on-policy"):
        config.loads("workers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n")
    with pytest.raises(config.ConfigError, match="3: algorithm.name: unknown value 'a2c'; choose one of"):
        config.loads("stop: {wall_time: 1}\nalgorithm:\n  name: a2c\n")
    with pytest.raises(config.ConfigError, match="algorithm.clip_coef: unknown key"):  # a PPO key under dqn
        config.loads("algorithm: {name: dqn, clip_coef: 0.2}\nworkers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n")
    exp = config.loads("algorithm: {name: dqn, n_step: 5}\nworkers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n")
    assert isinstance(exp.algorithm, config.DQNConfig) and exp.algorithm.n_step == 5
    assert config.loads(config.dump(exp)) == exp
