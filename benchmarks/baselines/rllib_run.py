"""RLlib PPO (ray 2.60.0, new API stack) for the side-by-side benchmark; runs inside benchmarks/.venvs/rllib.

    bash benchmarks/baselines/setup.sh rllib
    benchmarks/.venvs/rllib/bin/python benchmarks/baselines/rllib_run.py \
        --env cartpole --seconds 60 --num-workers 2 --envs-per-worker 16 --rollout 64 \
        --batch-size 2048 --epochs 4 --minibatch-size 512 --hidden 64 64 --lr 1e-3

Prints ONE JSON line on stdout: {"system", "env", "training_fps", "sampling_fps", "frames", "seconds", "notes", ...}.

How it runs: a local Ray instance (no dashboard), PPOConfig through RLlib's public API with
--num-workers env runners of --envs-per-worker envs each, rollout_fragment_length --rollout,
train_batch_size_per_learner --batch-size, --epochs x minibatches of --minibatch-size, one local
learner on the driver (CPU). `algo.train()` is called until --seconds have passed since the
Algorithm was built (start-up not counted); after every iteration the lifetime counter
num_env_steps_sampled_lifetime is read. RLlib's PPO is synchronous (sample a batch, then train on
all of it), so every sampled step is consumed by the learner in that same iteration: this counter is
the learner's consumption. (RLlib's num_env_steps_trained_lifetime adds up every minibatch pass,
about 17x the consumed steps at 4 epochs, so it is not used; its throughput timers are smoothed
averages, so they are not used for the headline either.)

What is measured: training_fps = lifetime env steps x frame skip per second between the first
iteration that ends after --warmup and the last iteration (the one that crosses --seconds: an
iteration is not interrupted); sampling_fps is the same
figure (synchronous); RLlib's sampling-phase-only rate (its smoothed timer) is reported as
sampling_phase_fps, for information.

Envs: CartPole-v1 with an MLP (fcnet_hiddens --hidden, tanh, shared value layers; --separate-critic:
vf_share_layers=False, an encoder of its own for the value); ALE/Pong-v5
(sticky actions) + gymnasium AtariPreprocessing (frame skip 4 with max-pool, 84x84 gray, 30 noop
starts) + FrameStackObservation 4, moved to channels-last (84, 84, 4) float32 in [0, 1] as RLlib's
CNN wants (it does not take uint8; RLlib's own Atari wrapper also hands it floats),
with NatureCNN convolutions (32x8/4, 64x4/2, 64x3/1, valid padding) and a 512 ReLU head layer for the
policy and one for the value (RLlib keeps the two heads separate; the encoder is shared). This is
our preprocessing, not RLlib's own Atari wrapper (which uses 64x64 frames). Float observations are
4x the bytes of our uint8 ones between RLlib's env runners and its learner.

HalfCheetah (--env halfcheetah, Box actions): HalfCheetah-v5 (gymnasium 1.2.2, mujoco 3.3.0), registered as
sbs_halfcheetah; an MLP fcnet_hiddens --hidden (64 64) tanh for the policy and, with --separate-critic,
vf_share_layers=False (a 64-64 tanh encoder of its own for the value); a diagonal Gaussian whose log-std is
a free parameter, not an output (free_log_std=True: state-independent, as ours and Sample Factory's);
RLlib's default normalize_actions=True, which maps the sample from [-1, 1] onto the bounds (here [-1, 1]) and
clips it there. --normalize-observations: the MeanStdFilter env-to-module connector (RLlib's running
mean/std of the observations, kept by each env runner and merged across them after every iteration; the
new API stack's replacement of observation_filter="MeanStdFilter"). --scale-rewards: gymnasium's
NormalizeReward(gamma) around each env (rewards divided by a running std of that env's discounted
return; RLlib has no reward scaling of its own). PPO's value loss keeps RLlib's vf_clip_param (10, on the
squared error) and use_kl_loss is off. A frame is an agent step. RLlib's learner takes 10 epochs x 32
minibatches of 64 per 2,048-step iteration: about 1.1 s an iteration on the 2-core machine when nothing else
runs (45-52 of them in a 60 s window, 2026-12-03), but 10-25 s when it shares the cores, and a window that
holds only a few iterations gives a coarse figure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SYSTEM = "rllib"


def make_pong(env_config=None):
    import ale_py
    import gymnasium as gym
    import numpy as np

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)  # v5: sticky actions 0.25
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False
    )
    env = gym.wrappers.FrameStackObservation(env, 4)  # (4, 84, 84)
    # RLlib's CNN wants channels last and float input (its conv stack does not cast uint8), as its own
    # Atari wrapper produces: (84, 84, 4) float32 in [0, 1]
    space = gym.spaces.Box(0.0, 1.0, (84, 84, 4), np.float32)
    return gym.wrappers.TransformObservation(
        env, lambda o: np.moveaxis(o, 0, -1).astype(np.float32) * np.float32(1 / 255), space
    )


def make_halfcheetah(env_config=None):
    """HalfCheetah-v5 (mujoco 3.3.0), rewards scaled by gymnasium's NormalizeReward when asked (--scale-rewards):
    each reward divided by a running std of this env's discounted return, as our scale_rewards does per batch.
    RLlib's episode returns are then of the scaled rewards; RecordEpisodeStatistics beneath the scaling puts
    the env's own return in the last step's info, which RawReturn reports."""
    import gymnasium as gym

    env = gym.make("HalfCheetah-v5")
    if (env_config or {}).get("scale_rewards"):
        env = gym.wrappers.NormalizeReward(gym.wrappers.RecordEpisodeStatistics(env), gamma=env_config["gamma"])
    return env


RAW_RETURN = "raw_episode_return_mean"


def raw_return_callback(window: int):
    """An RLlib callback that logs each episode's unscaled return (RecordEpisodeStatistics' info) as
    RAW_RETURN, with the window RLlib gives its own episode_return_mean on each env runner."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class RawReturn(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
            info = episode.get_infos(-1)
            if metrics_logger is not None and "episode" in info:
                metrics_logger.log_value(RAW_RETURN, float(info["episode"]["r"]), window=window)

    return RawReturn


def obs_filter(*_args, **_kwargs):
    """The env-to-module connector that normalises observations (RLlib's running mean/std filter, its
    statistics merged across env runners after each iteration)."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return MeanStdFilter()


def lifetime(result: dict, key: str):
    """The counter `key` wherever this RLlib version reports it (top level, env_runners or learners)."""
    if key in result:
        return result[key]
    for sub in ("env_runners", "learners"):
        d = result.get(sub) or {}
        if key in d:
            return d[key]
        allm = d.get("__all_modules__") or {}
        if key in allm:
            return allm[key]
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_matched_args(p)
    args = p.parse_args(argv)
    common.check_matched(args)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    t_launch = time.time()
    # one CPU per env runner plus the driver's learner; the machine may have fewer cores (oversubscribed)
    ray.init(
        num_cpus=args.num_workers + 1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=True,
        logging_level="ERROR",
    )
    algo = None
    try:
        env_config = {}
        if args.env == "cartpole":
            env = "CartPole-v1"
            model = DefaultModelConfig(
                fcnet_hiddens=list(args.hidden), fcnet_activation="tanh", vf_share_layers=not args.separate_critic
            )
        elif args.env == "halfcheetah":
            env = "sbs_halfcheetah"
            register_env(env, make_halfcheetah)
            env_config = {"scale_rewards": args.scale_rewards, "gamma": args.gamma}
            # free_log_std: a state-independent log-std (as ours and Sample Factory's adaptive_stddev=False)
            model = DefaultModelConfig(
                fcnet_hiddens=list(args.hidden),
                fcnet_activation="tanh",
                vf_share_layers=not args.separate_critic,
                free_log_std=True,
            )
        else:
            env = "sbs_pong"
            register_env(env, make_pong)
            model = DefaultModelConfig(
                conv_filters=[[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]],
                conv_activation="relu",
                head_fcnet_hiddens=[512],
                head_fcnet_activation="relu",
                vf_share_layers=not args.separate_critic,
            )
        scaled = args.env == "halfcheetah" and args.scale_rewards  # RLlib's own returns are of scaled rewards
        config = (
            PPOConfig()
            .environment(env, env_config=env_config)
            .framework("torch")
            .env_runners(
                num_env_runners=args.num_workers,
                num_envs_per_env_runner=args.envs_per_worker,
                rollout_fragment_length=args.rollout,
                num_cpus_per_env_runner=1,
                **({"env_to_module_connector": obs_filter} if args.normalize_observations else {}),
            )
            .learners(num_learners=0)
            .training(
                train_batch_size_per_learner=args.batch_size,
                minibatch_size=args.minibatch_size,
                num_epochs=args.epochs,
                lr=args.lr,
                gamma=args.gamma,
                lambda_=args.gae_lambda,
                clip_param=args.clip,
                entropy_coeff=args.entropy_coef,
                vf_loss_coeff=args.value_coef,
                grad_clip=args.max_grad_norm,
                use_kl_loss=False,
            )
            .rl_module(model_config=model)
            .reporting(
                min_time_s_per_iteration=0,
                min_sample_timesteps_per_iteration=0,
                metrics_num_episodes_for_smoothing=args.return_window,
            )  # the mean return's window
            .debugging(seed=args.seed)
            .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=False)  # fail loudly
        )
        if scaled:
            config = config.callbacks(raw_return_callback(-(-args.return_window // args.num_workers)))
        algo = config.build_algo()
        t0 = time.time()
        common.log(f"rllib: built in {t0 - t_launch:.1f}s, training for {args.seconds:g}s")
        samples, phase, progress = [], [], []
        while time.time() - t0 < args.seconds:
            result = algo.train()
            now = time.time()
            # synchronous PPO trains on every sampled step exactly once per iteration (for `epochs` passes):
            # the sampled lifetime counter is the learner's consumption. RLlib's "trained" lifetime counter
            # adds up every minibatch pass (epochs x, plus more), so it is not used.
            sampled = lifetime(result, "num_env_steps_sampled_lifetime")
            if sampled is None:
                raise SystemExit(f"no num_env_steps_sampled_lifetime in RLlib's result; keys: {sorted(result)}")
            samples.append((now, int(sampled), int(sampled)))
            runners = result.get("env_runners") or {}
            progress.append(
                (
                    now,
                    int(sampled),
                    runners.get(RAW_RETURN if scaled else "episode_return_mean"),
                    min(int(runners.get("num_episodes_lifetime") or 0), args.return_window),
                )
            )
            if (
                args.target_return is not None
                and common.reached(progress, t0, args.target_return, args.return_window)["seconds_to_target"]
                is not None
            ):
                break
            timers = result.get("timers") or {}
            if "env_runner_sampling_timer" in timers:
                phase.append(timers["env_runner_sampling_timer"])
        end = samples[-1][0] if samples else time.time()
    finally:
        work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="sbs-rllib-"))
        if algo is not None:
            logdir = algo.logdir  # RLlib's per-run folder under ~/ray_results: moved into the work dir
            algo.stop()
            if logdir and os.path.isdir(logdir):
                work.mkdir(parents=True, exist_ok=True)
                shutil.move(logdir, work / "rllib_logdir")
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(logdir))  # ~/ray_results, if we were its only user
        ray.shutdown()
    skip = common.FRAME_SKIP[args.env]
    r = common.rates(samples, t0, args.warmup, end + 1e-6, skip)
    # RLlib's smoothed sampling-phase timer: reported for information only
    if phase and r["training_fps"] is not None and len(samples) > 1:
        per_iter = (samples[-1][2] - samples[0][2]) / (len(samples) - 1) if samples[0][2] is not None else None
        if per_iter:
            r["sampling_phase_fps"] = round(per_iter * skip / phase[-1], 1)
    notes = (
        f"PPO (sync: sample then train on it), lifetime num_env_steps_sampled_lifetime after each algo.train(), "
        f"{r.pop('window')}, {len(samples)} iterations; build {t0 - t_launch:.1f}s not counted"
    )
    if args.env == "pong":
        notes += (
            "; ALE/Pong-v5 + AtariPreprocessing(84x84 gray, skip 4 max-pool) + stack 4 (same as ours, "
            "not RLlib's 64x64 wrapper), NatureCNN convs + separate 512 heads for pi and vf, float32 obs"
        )
    if args.env == "halfcheetah":
        notes += (
            "; HalfCheetah-v5, MLP fcnet_hiddens %s tanh, vf_share_layers=%s, free_log_std=True, "  # noqa: UP031
            "normalize_actions (clipped to the bounds)%s%s"
            % (
                args.hidden,
                not args.separate_critic,
                ", MeanStdFilter connector" if args.normalize_observations else "",
                ", NormalizeReward(gamma) per env" if args.scale_rewards else "",
            )
        )
    if args.target_return is not None:
        r.update(
            common.reached(progress, t0, args.target_return, args.return_window), startup_s=round(t0 - t_launch, 1)
        )
    common.emit({"system": SYSTEM, "env": args.env, "seed": args.seed, **r, "notes": notes, "work_dir": str(work)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
