"""Multi-agent envs as rows: every (env, agent) pair a row, agents that left masked, MAPPO's value over the
env's global state the same at inference and in training, and VDN's team transitions and summed values."""

import gymnasium
import numpy as np
import pytest
import torch

from conftest import contract_of
from srl_hpc import config
from srl_hpc.algorithms.mappo import MAPPO
from srl_hpc.algorithms.vdn import team_q, team_targets
from srl_hpc.envs.agents import AgentRows, TeamRows, assign_teams
from srl_hpc.envs.backends import agent_count, make_env_group, spaces
from srl_hpc.handlers.buffer import team_steps
from srl_hpc.handlers.policy import InferenceEngine
from srl_hpc.handlers.ring import RingGroup
from srl_hpc.models.building import build_model
from srl_hpc.models.heads import CentralisedActorCritic, global_state
from srl_hpc.models.torsos import MLP

SPREAD = """\
env: {id: "mpe2.simple_spread_v3:parallel_env", kwargs: {N: 3, max_cycles: 25, continuous_actions: false}}
algorithm: {name: mappo}
stop: {wall_time: 1}
"""


class Relay:
    """PettingZoo's parallel API, two agents: "b" terminates on the 2nd step, the episode truncates on the 4th.
    Observations count the steps of the episode."""

    possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return gymnasium.spaces.Box(0, 100, (1,), np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents)  # no actions for agents that left
        self.t += 1
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        term = {a: a == "b" and self.t == 2 for a in self.agents}
        trunc = {a: self.t == 4 for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rewards, term, trunc, {a: {} for a in obs}

    def close(self):
        pass


def test_agents_that_left_and_auto_reset_steps_are_masked_in_segments():
    rows = AgentRows([Relay(), Relay()])
    group = RingGroup(rows, segment_length=6, seed=0, contract=contract_of(rows))
    assert group.n == 4  # rows: env 0 (a, b), env 1 (a, b)
    obs, segment = group.request_obs(), None
    for _ in range(7):
        reply = {"actions": np.zeros(4, np.int64), "logp": np.zeros(4, np.float32), "values": np.zeros(4, np.float32)}
        obs, segment = group.advance(reply, 0)
        if segment is not None:
            break
    assert segment["obs"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 0]  # a: 4 steps, its final obs, a new episode
    assert segment["valid"][0].tolist() == [True, True, True, True, False, True]
    assert segment["dones"][0].tolist() == [False, False, False, True, False, False]
    # b: 2 steps and done; the auto-reset-like step after, and one more while a plays on, are not b's
    assert segment["valid"][1].tolist() == [True, True, False, False, False, True]
    assert segment["dones"][1].tolist() == [False, True, False, False, False, False]
    assert segment["rewards"][1].tolist() == [1, 1, 0, 0, 0, 1]  # nothing while away
    assert np.array_equal(segment["valid"][2:], segment["valid"][:2])  # env 1 the same
    # an episode per agent: the b's, the a's, and (the 7th step, into the next segment) the b's again
    assert group.finished_episodes == [(2.0, 2), (2.0, 2), (4.0, 4), (4.0, 4), (2.0, 2), (2.0, 2)]


def test_agents_need_one_observation_and_action_space():
    class Mixed(Relay):
        def action_space(self, agent):
            return gymnasium.spaces.Discrete(2 if agent == "a" else 3)

    with pytest.raises(ValueError, match="'a' and 'b' have different observation or action spaces"):
        AgentRows([Mixed()])


def test_agents_go_to_the_policy_whose_pattern_they_match_and_to_exactly_one():
    agents = ["adversary_0", "adversary_1", "agent_0"]
    assert assign_teams(agents, {"prey": ("agent_*",), "predator": ("adversary_*",)}) == {
        "prey": ["agent_0"],
        "predator": ["adversary_0", "adversary_1"],
    }
    with pytest.raises(ValueError, match="agent 'agent_0' matches no policy"):
        assign_teams(agents, {"predator": ("adversary_*",)})
    with pytest.raises(ValueError, match="agent 'adversary_1' matches policies a, b"):
        assign_teams(agents, {"a": ("adversary_*", "agent_*"), "b": ("adversary_1",)})
    with pytest.raises(ValueError, match="policy 'c' matches none of the env's agents"):
        assign_teams(agents, {"a": ("*",), "c": ("wolf_*",)})


class Chase(Relay):
    """Two hunters (2 observation floats, 3 actions) and a runner (3 floats, 2 actions); the runner is caught
    (terminates) on the 2nd step; rewards say which action an agent took (10 x action + its number)."""

    possible_agents = ["hunter_0", "runner_0", "hunter_1"]

    def observation_space(self, agent):
        return gymnasium.spaces.Box(0, 100, (2 if agent.startswith("hunter") else 3,), np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(3 if agent.startswith("hunter") else 2)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {}

    def _obs(self):
        return {a: np.full(self.observation_space(a).shape, self.t, np.float32) for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents)
        self.t += 1
        rewards = {a: 10.0 * actions[a] + int(a[-1]) for a in self.agents}
        term = {a: a == "runner_0" and self.t == 2 for a in self.agents}
        trunc = {a: self.t == 3 for a in self.agents}
        obs = self._obs()
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rewards, term, trunc, {}


def test_each_policy_gets_its_agents_rows_and_the_env_steps_with_every_policys_actions():
    rows = TeamRows([Chase(), Chase()], [["hunter_0", "hunter_1"], ["runner_0"]])
    hunters, runners = rows.teams
    assert (hunters.num_envs, hunters.single_observation_space.shape, hunters.single_action_space.n) == (4, (2,), 3)
    assert (runners.num_envs, runners.single_observation_space.shape, runners.single_action_space.n) == (2, (3,), 2)
    (h_obs, h_info), (r_obs, r_info) = rows.reset(seed=0)
    assert h_obs.shape == (4, 2) and r_obs.shape == (2, 3) and h_info["present"].all() and r_info["present"].all()
    # rows env-major: env 0's hunters, env 1's hunters; each agent's reward shows the action its policy chose
    (h_obs, h_rew, _, _, _), (r_obs, r_rew, r_term, _, r_info) = rows.step([np.array([1, 2, 0, 1]), np.array([1, 0])])
    assert h_rew.tolist() == [10, 21, 0, 11] and r_rew.tolist() == [10, 0]
    assert h_obs[:, 0].tolist() == [1] * 4 and r_obs.shape == (2, 3)
    (_, h_rew, *_), (_, r_rew, r_term, _, r_info) = rows.step([np.zeros(4, int), np.ones(2, int)])
    assert r_term.tolist() == [True, True] and not r_info["present"].any()  # caught: masked from now on
    (_, h_rew, _, h_trunc, h_info), (_, r_rew, *_) = rows.step([np.ones(4, int), np.ones(2, int)])
    assert h_rew.tolist() == [10, 11, 10, 11] and r_rew.tolist() == [0, 0] and h_trunc.all()
    (_, h_rew, *_), (r_obs, _, _, _, r_info) = rows.step([np.ones(4, int), np.ones(2, int)])  # the auto-reset
    assert h_rew.tolist() == [0] * 4 and r_info["present"].all() and r_obs[:, 0].tolist() == [0, 0]


class Stated(Relay):
    """Relay with a global state of its own: [steps so far, 42]."""

    state_space = gymnasium.spaces.Box(0, 100, (2,), np.float32)

    def state(self):
        return np.array([self.t, 42.0], np.float32)


def test_a_centralised_critic_reads_the_envs_own_state_where_it_has_one():
    rows = AgentRows([Stated(), Stated()], global_state=True)
    obs, _ = rows.reset(seed=0)
    assert rows.single_observation_space.shape == (3,) and obs[:, 1:].tolist() == [[0, 42]] * 4
    obs, *_ = rows.step(np.zeros(4, int))
    assert obs[:, 0].tolist() == [1] * 4 and obs[:, 1:].tolist() == [[1, 42]] * 4  # own observation, then the state
    assert AgentRows([Relay()], global_state=True).single_observation_space.shape == (1,)  # none: nothing added
    model = CentralisedActorCritic(MLP(1, (8,)), MLP(2, (8,)), 2, agents=2, state_size=2)
    logits, values = model(torch.from_numpy(obs))
    own, state = obs.copy(), obs.copy()
    # another own observation; another state. (The state [1, 42] saturates the critic's tanh units: changing
    # the step count alone left its output within allclose for about 1 in 6 initialisations.)
    own[:, 0], state[:, 1:] = 7, 0
    with torch.no_grad():
        assert torch.equal(model(torch.from_numpy(own))[1], values)
        assert not torch.equal(model(torch.from_numpy(own))[0], logits)
        assert not torch.allclose(model(torch.from_numpy(state))[1], values)


def test_global_state_puts_each_envs_agents_side_by_side():
    obs = torch.arange(12.0).reshape(6, 2)  # 2 envs x 3 agents, 2 features
    state = global_state(obs, 3)
    assert state.shape == (6, 6)
    assert state[0].tolist() == state[2].tolist() == [0, 1, 2, 3, 4, 5] and state[3].tolist() == [6, 7, 8, 9, 10, 11]
    with pytest.raises(ValueError, match="not whole envs"):
        global_state(obs[:4], 3)


@pytest.mark.slow
def test_mappo_trains_on_the_values_its_policy_workers_computed():
    """The trainer's global states (built from segment rows) give the values inference gave (from whole-env
    batches): the critic sees the same input in both places."""
    pytest.importorskip("mpe2")
    exp = config.loads(SPREAD)
    assert agent_count(exp.env) == 3
    model = build_model(exp, *spaces(exp.env, global_state=True))
    engine = InferenceEngine(model, MAPPO.act, torch.device("cpu"), seed=0)
    envs = make_env_group(exp.env, 2, seed=5, global_state=True)
    group = RingGroup(envs, 10, 5, contract_of(envs, "mappo"))
    segments, obs = [], group.request_obs()
    while len(segments) < 3:  # 30 steps: through an episode end (25)
        obs, segment = group.advance(engine.infer(obs, {}), 0)
        if segment is not None:
            segments.append(segment)
    mappo = MAPPO(model, exp.algorithm, torch.device("cpu"))
    batch = mappo.prepare({k: np.concatenate([s[k] for s in segments]) for k in segments[0]})
    # spread has a state() of its own (54 floats: the three agents' observations), after each agent's 18
    assert batch["obs"].shape[1] == 18 + 54 and "state" not in batch
    assert np.allclose(group.envs.rows.teams[0].obs[0, 18:], group.envs.envs[0].state())
    with torch.no_grad():
        _, values = mappo.evaluate(batch)
    assert torch.allclose(values, batch["values"], atol=1e-5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats, _ = mappo.update(batch, frames_done=0)
    assert np.isfinite(stats["value_loss"]) and np.isfinite(stats["policy_loss"])
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # an update was applied
    with torch.no_grad():  # and the critic moved toward the returns it was trained on
        _, trained = mappo.evaluate(batch)
    assert (trained - batch["returns"]).pow(2).mean() < (values - batch["returns"]).pow(2).mean()


def test_a_buffer_makes_team_steps_of_an_envs_agent_rows():
    rows, T = 6, 4  # 2 envs x 3 agents
    seg = {
        "obs": np.arange(rows * T * 2, dtype=np.float32).reshape(rows, T, 2),
        "actions": np.arange(rows * T).reshape(rows, T),
        "rewards": np.ones((rows, T), np.float32),
        "dones": np.zeros((rows, T), bool),
        "terminated": np.zeros((rows, T), bool),
        "valid": np.ones((rows, T), bool),
        "versions": np.zeros((rows, T), np.int64),
    }
    seg["rewards"][1, 2] = 4.0  # env 0's second agent, step 2
    seg["dones"][:3, 3] = True  # env 0 ends at step 3, every agent
    steps = team_steps(seg, 3, "actor/0")
    assert steps["obs"].shape == (2, T, 3, 2) and steps["actions"].shape == (2, T, 3)
    assert steps["actions"][0, 1].tolist() == [1, 5, 9]  # agents 0, 1, 2 of env 0 at step 1
    assert steps["rewards"][0].tolist() == [1, 1, 2, 1]  # the agents' mean
    assert steps["dones"].tolist() == [[False, False, False, True], [False] * 4]
    seg["valid"][4, 1] = False  # an agent of env 1 away while the others act
    with pytest.raises(ValueError, match="actor/0: an agent left its env"):
        team_steps(seg, 3, "actor/0")


def test_vdns_team_value_is_the_sum_of_its_agents_values():
    model = torch.nn.Linear(2, 3, bias=False)  # Q(o) for 3 actions
    obs = torch.randn(4, 3, 2)  # 4 teams of 3 agents
    actions = torch.randint(3, (4, 3))
    q = model(obs)
    expected = sum(q[:, k].gather(1, actions[:, k : k + 1]).squeeze(1) for k in range(3))
    assert torch.allclose(team_q(model, obs, actions), expected)
    with torch.no_grad():
        best = sum(q[:, k].max(1).values for k in range(3))
    targets = team_targets(model, model, obs, torch.ones(4), torch.full((4,), 0.5), double=True)
    assert torch.allclose(targets, 1 + 0.5 * best)
