"""Env backends: each one auto-resets on the next step (what the actors rely on), serves the same spaces
as the gymnasium path, and a backend that cannot serve an id says so naming env.backend."""
import importlib.util

import numpy as np
import pytest

from srl_hpc import config
from srl_hpc.envs.backends import make_env_group, resolve_backend, spaces

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
# `make test` installs envpool (its tests run there); elsewhere its cases are skipped, saying why
BACKENDS = ["sync", "vector", pytest.param("envpool", marks=pytest.mark.skipif(
    not HAS_ENVPOOL, reason="envpool is not installed (pip install '.[envpool]'; make test-install does it)"))]
PONG = dict(id="ALE/Pong-v5", atari=config.AtariConfig())


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_auto_resets_on_the_next_step(backend):
    envs = make_env_group(config.EnvConfig(id="CartPole-v1", backend=backend), 2, seed=0)
    envs.reset(seed=0)
    done = np.zeros(2, bool)
    for _ in range(100):  # always left: the pole falls in about 10 steps
        if done.any():
            break
        obs, _, terminated, truncated, _ = envs.step(np.zeros(2, np.int64))
        done = terminated | truncated
    assert done.any() and (np.abs(obs[done][:, 2]) > 0.2).all()  # the episode's final observation: the pole has fallen
    obs, reward, terminated, truncated, _ = envs.step(np.zeros(2, np.int64))
    assert (np.abs(obs[done]) <= 0.05).all()  # ... then the first of the next episode (CartPole starts within 0.05)
    assert reward[done].tolist() == [0.0] * int(done.sum()) and not (terminated | truncated)[done].any()
    envs.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_atari_backends_serve_the_same_preprocessed_frames(backend):
    env_cfg = config.EnvConfig(**PONG, backend=backend)
    obs_space, action_space = spaces(env_cfg)
    assert obs_space.shape == (4, 84, 84) and obs_space.dtype == np.uint8 and action_space.n == 6
    envs = make_env_group(env_cfg, 2, seed=1)
    obs, _ = envs.reset(seed=1)
    for _ in range(30):
        obs, *_ = envs.step(np.full(2, 2, np.int64))
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8 and obs.std() > 0  # a real, moving screen
    envs.close()


def test_auto_picks_the_fastest_backend_that_serves_the_id():
    assert resolve_backend(config.EnvConfig(id="CartPole-v1")) == "vector"
    assert resolve_backend(config.EnvConfig(id="ALE/Pong-v5", atari=config.AtariConfig())) == "vector"
    assert resolve_backend(config.EnvConfig(id="srl_hpc/SlowStep-v0")) == "sync"  # none of the others has it
    if HAS_ENVPOOL:
        assert resolve_backend(config.EnvConfig(id="Acrobot-v1")) == "envpool"  # no vector entry point; envpool has it


def test_a_backend_that_cannot_serve_the_id_names_the_setting():
    with pytest.raises(ValueError, match=r"env.backend is 'vector' but 'srl_hpc/SlowStep-v0' has no vectorised"):
        resolve_backend(config.EnvConfig(id="srl_hpc/SlowStep-v0", backend="vector"))
    if HAS_ENVPOOL:
        with pytest.raises(ValueError, match=r"env.backend is 'envpool' but envpool has no 'srl_hpc/SlowStep-v0'"):
            resolve_backend(config.EnvConfig(id="srl_hpc/SlowStep-v0", backend="envpool"))
