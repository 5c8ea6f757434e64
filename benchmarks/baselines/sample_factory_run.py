"""Sample Factory 2.1.1 (APPO) for the side-by-side benchmark; runs inside benchmarks/.venvs/sample_factory.

    bash benchmarks/baselines/setup.sh sample_factory
    benchmarks/.venvs/sample_factory/bin/python benchmarks/baselines/sample_factory_run.py \
        --env cartpole --seconds 60 --num-workers 2 --envs-per-worker 16 --rollout 64 \
        --batch-size 2048 --epochs 4 --minibatch-size 512 --hidden 64 64 --lr 1e-3

Prints ONE JSON line on stdout: {"system", "env", "training_fps", "sampling_fps", "frames", "seconds", "notes", ...}.

How it runs: this script starts itself again as a child in a new session (process group); the child
builds Sample Factory's runner through its public API (parse_sf_args/parse_full_cfg, register_env,
make_runner, AlgoObserver) and an observer appends, after every learner iteration, the learner's
env-step counter (frames the learner has trained on) and the inference workers' sample counter to a
file. Sample Factory's --train_for_seconds does not stop it, so the parent sends SIGINT to the
child's process group after --seconds (counted from when Sample Factory started its processes), then
SIGTERM/SIGKILL to whatever is left of the group: no lingering workers.

What is measured: training_fps = learner-consumed agent steps x frame skip per second between the
first sample after --warmup and the last one inside the window; sampling_fps = the same for the
inference workers' processed observations (reported every few seconds, so coarser).

Settings: APPO, asynchronous (--async_rl True, the default; --sync for synchronous PPO, which needs
workers x envs x rollout == batch), no V-trace, no RNN (recurrence 1), no input or return
normalisation (unless --normalize-observations / --scale-rewards), shared actor-critic weights
(--separate-critic: not shared), double-buffered sampling (worker_num_splits 2), one inference worker, CPU.
Sample Factory's batch_size is the minibatch; num_batches_per_epoch = batch / minibatch. Envs: CartPole-v1
with an MLP (tanh); ALE/Pong-v5 (sticky actions) + gymnasium AtariPreprocessing (frame skip 4 with max-pool,
84x84 gray, 30 noop starts) + frame stack 4 with Sample Factory's convnet_atari encoder (NatureCNN convs) and
a 512 fc layer, ReLU.

HalfCheetah (--env halfcheetah, Box actions), as Sample Factory's own sf_examples/mujoco sets it up where the
matched settings leave it free: HalfCheetah-v4 (gymnasium 0.29.1, the newest Sample Factory 2.1.1 accepts,
registers no -v5; -v4 runs the same model, reward and frame skip under mujoco 3.3.0), wrapped in
gymnasium's ClipAction (Sample Factory passes the Gaussian's samples on unclipped; ours clips them); the
encoder an MLP --hidden (64 64) tanh, separate actor and critic weights (--separate-critic ->
--actor_critic_share_weights=False), a Gaussian action head with a state-independent learned std
(--adaptive_stddev=False, initial std 1, no tanh squashing: --continuous_tanh_scale=0),
--policy_initialization=torch_default; --normalize-observations -> --normalize_input=True (running mean/std
of the observations, in the learner's model, updated from each training batch); --scale-rewards ->
--normalize_returns=True (running mean/std normalisation of the discounted returns the value head is trained
on: Sample Factory's way of scaling rewards, not a reward wrapper). No reward clipping or scaling beyond that
(reward_scale 1). Value-loss clipping stays Sample Factory's (--ppo_clip_value 1.0, on normalised returns);
ours clips at clip_coef. A frame is an agent step. The rollout is 64, not 256: Sample Factory's minibatches
are whole trajectories, so its rollout may not exceed the minibatch (64); see sf_rollout(). The batch stays
2048 agent steps (32 trajectories of 64), trained on for 10 epochs of 32 minibatches of 64.
"""

from __future__ import annotations

# Sample Factory's Atari path never imports ale_py, and without it gymnasium 0.29 does not know "ALE/...".
try:
    import ale_py  # noqa: F401
except ImportError:  # cartpole still works
    ale_py = None

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SYSTEM = "sample_factory"


# ----------------------------------------------------------------------------------------- the child


def make_env(full_env_name, cfg=None, env_config=None, render_mode=None):
    import gymnasium as gym

    if full_env_name == "sbs_cartpole":
        return gym.make("CartPole-v1", render_mode=render_mode)
    if full_env_name == "sbs_halfcheetah":  # gymnasium 0.29.1 has -v4; -v5 (gymnasium 1.x) has the same dynamics
        env_id = "HalfCheetah-v5" if "HalfCheetah-v5" in gym.registry else "HalfCheetah-v4"
        # Sample Factory hands the Gaussian's samples to the env as they are: clipped here, as ours clips them
        return gym.wrappers.ClipAction(gym.make(env_id, render_mode=render_mode))
    if full_env_name == "sbs_pong":
        from sample_factory.envs.env_wrappers import NumpyObsWrapper

        env = gym.make("ALE/Pong-v5", frameskip=1, render_mode=render_mode)  # v5: sticky actions 0.25
        env = gym.wrappers.AtariPreprocessing(
            env,
            noop_max=30,
            frame_skip=4,
            screen_size=84,
            terminal_on_life_loss=False,
            grayscale_obs=True,
            scale_obs=False,
        )
        env = gym.wrappers.FrameStack(env, 4)  # (4, 84, 84) uint8, channels first as Sample Factory wants
        return NumpyObsWrapper(env)
    raise ValueError(full_env_name)


def sf_rollout(args) -> int:
    """Sample Factory builds minibatches from whole trajectories (batch_size // rollout of them): a minibatch
    smaller than the rollout would hold none, and its learner then skips every batch as invalid. So the
    rollout is cut to the largest length that divides both (HalfCheetah: 256 -> 64, minibatch 64)."""
    return args.rollout if args.minibatch_size % args.rollout == 0 else math.gcd(args.rollout, args.minibatch_size)


def sf_argv(args, train_dir: str) -> list[str]:
    n_mb = args.batch_size // args.minibatch_size
    argv = [
        "--algo=APPO",
        f"--env=sbs_{args.env}",
        f"--experiment=sbs_{args.env}_{os.getpid()}",
        f"--train_dir={train_dir}",
        "--device=cpu",
        f"--async_rl={not args.sync}",
        "--serial_mode=False",
        "--restart_behavior=overwrite",
        f"--num_workers={args.num_workers}",
        f"--num_envs_per_worker={args.envs_per_worker}",
        f"--worker_num_splits={2 if args.envs_per_worker % 2 == 0 else 1}",
        "--policy_workers_per_policy=1",
        f"--rollout={sf_rollout(args)}",
        "--recurrence=1",
        "--use_rnn=False",
        "--with_vtrace=False",
        f"--batch_size={args.minibatch_size}",
        f"--num_batches_per_epoch={n_mb}",
        f"--num_epochs={args.epochs}",
        "--shuffle_minibatches=True",
        f"--learning_rate={args.lr}",
        "--lr_schedule=constant",
        f"--gamma={args.gamma}",
        f"--gae_lambda={args.gae_lambda}",
        f"--ppo_clip_ratio={args.clip}",
        f"--exploration_loss_coeff={args.entropy_coef}",
        f"--value_loss_coeff={args.value_coef}",
        f"--max_grad_norm={args.max_grad_norm}",
        f"--normalize_input={args.normalize_observations}",
        f"--normalize_returns={args.scale_rewards}",
        f"--actor_critic_share_weights={not args.separate_critic}",
        "--summaries_use_frameskip=False",
        "--decorrelate_experience_max_seconds=0",
        "--save_every_sec=1000000",
        "--save_best_every_sec=1000000",
        "--with_wandb=False",
        f"--seed={args.seed}",
        f"--stats_avg={args.return_window}",  # the mean return is over that many episodes
    ]
    if args.env == "cartpole":
        argv += ["--encoder_mlp_layers", *map(str, args.hidden), "--nonlinearity=tanh", "--obs_scale=1.0"]
    elif args.env == "halfcheetah":  # as sf_examples/mujoco: a state-independent log-std, torch's default init
        argv += [
            "--encoder_mlp_layers",
            *map(str, args.hidden),
            "--nonlinearity=tanh",
            "--obs_scale=1.0",
            "--adaptive_stddev=False",
            "--policy_initialization=torch_default",
            "--continuous_tanh_scale=0",
        ]
    else:
        argv += [
            "--encoder_conv_architecture=convnet_atari",
            "--encoder_conv_mlp_layers",
            "512",
            "--nonlinearity=relu",
            "--obs_scale=255.0",
            "--env_frameskip=1",
            "--env_framestack=4",
        ]
    return argv


def child(args) -> int:
    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner

    register_env(f"sbs_{args.env}", make_env)
    argv = sf_argv(args, args.train_dir)
    parser, _ = parse_sf_args(argv=argv)
    cfg = parse_full_cfg(parser, argv)

    class Probe(AlgoObserver):
        def __init__(self, path):
            self.f = open(path, "a", buffering=1)

        def on_start(self, runner):
            self.f.write(json.dumps({"start": time.time()}) + "\n")

        def on_training_step(self, runner, training_iteration_since_resume):
            returns = runner.policy_avg_stats.get("reward", [()])[0]  # the last --stats_avg episodes' returns
            self.f.write(
                json.dumps(
                    {
                        "t": time.time(),
                        "trained": int(sum(runner.env_steps.values())),
                        "sampled": int(sum(runner.samples_collected)),
                        "mean_return": float(sum(returns) / len(returns)) if returns else None,
                        "episodes": len(returns),
                    }
                )
                + "\n"
            )

    cfg, runner = make_runner(cfg)
    runner.register_observer(Probe(args.samples))
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    return 0 if status in (ExperimentStatus.SUCCESS, ExperimentStatus.INTERRUPTED) else 1


# ---------------------------------------------------------------------------------------- the parent


def read_samples(path: Path):
    """(start time, [(time, trained, sampled)], [(time, trained, mean return, episodes in it)])"""
    start, samples, progress = None, [], []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue  # a half-written last line
            if "start" in d:
                start = d["start"]
            else:
                samples.append((d["t"], d["trained"], d["sampled"]))
                progress.append((d["t"], d["trained"], d["mean_return"], d["episodes"]))
    return start, samples, progress


def parent(args) -> int:
    common.check_matched(args)
    if args.sync and args.num_workers * args.envs_per_worker * args.rollout != args.batch_size:
        raise SystemExit("synchronous Sample Factory needs workers x envs x rollout == batch size")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="sbs-sf-"))
    work.mkdir(parents=True, exist_ok=True)
    samples_path, log_path = work / "samples.jsonl", work / "sf.log"
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--samples",
        str(samples_path),
        "--train-dir",
        str(work / "train_dir"),
    ] + args.forward
    common.log(f"sample_factory: starting ({args.env}, {args.seconds:g}s), log {log_path}")
    t_launch = time.time()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(
            cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    pgid = proc.pid
    start = None
    try:
        while start is None:  # wait for Sample Factory to start its processes
            if proc.poll() is not None:
                break
            if time.time() - t_launch > args.startup_timeout:
                break
            time.sleep(0.5)
            start, _, _ = read_samples(samples_path)
        if start is not None:
            end = start + args.seconds
            while time.time() < end and proc.poll() is None:
                time.sleep(min(0.5, max(0.0, end - time.time())))
                if args.target_return is not None:
                    progress = read_samples(samples_path)[2]
                    if (
                        common.reached(progress, start, args.target_return, args.return_window)["seconds_to_target"]
                        is not None
                    ):
                        break
        end = time.time()
    finally:
        how = common.stop_group(pgid, proc)
    start, samples, progress = read_samples(samples_path)
    tail = log_path.read_text(errors="replace")[-3000:]
    if start is None or not samples:
        common.log(f"sample_factory: no training progress recorded; log tail:\n{tail}")
        common.emit(
            {
                "system": SYSTEM,
                "env": args.env,
                "training_fps": None,
                "sampling_fps": None,
                "frames": 0,
                "seconds": 0,
                "error": "no training progress (see log)",
                "log": str(log_path),
            }
        )
        return 1
    r = common.rates(samples, start, args.warmup, end, common.FRAME_SKIP[args.env])
    mode = "sync PPO" if args.sync else "APPO async"
    notes = (
        f"{mode}, no V-trace/RNN"
        + ("" if args.normalize_observations else "/normalisation")
        + "; learner env-step counter sampled after each training "
        f"iteration, {r.pop('window')}; sampling = inference workers' observation counter; "
        f"start-up {start - t_launch:.1f}s not counted; {how}"
    )
    if sf_rollout(args) != args.rollout:
        notes += f"; rollout {sf_rollout(args)} instead of {args.rollout} (its minibatches are whole trajectories)"
    if args.env == "halfcheetah":
        notes += (
            f"; HalfCheetah-v4 + ClipAction, MLP {args.hidden} tanh, share_weights={not args.separate_critic}, "
            f"adaptive_stddev=False, normalize_input={args.normalize_observations}, "
            f"normalize_returns={args.scale_rewards}"
        )
    if args.env == "pong":
        notes += (
            "; ALE/Pong-v5 + AtariPreprocessing(84x84 gray, skip 4 max-pool) + stack 4 (same as ours), "
            "convnet_atari+fc512"
        )
    if args.target_return is not None:
        r.update(
            common.reached(progress, start, args.target_return, args.return_window),
            startup_s=round(start - t_launch, 1),
        )
    common.emit({"system": SYSTEM, "env": args.env, "seed": args.seed, **r, "notes": notes, "log": str(log_path)})
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_matched_args(p)
    p.add_argument("--sync", action="store_true", help="synchronous PPO instead of APPO")
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--samples", help=argparse.SUPPRESS)
    p.add_argument("--train-dir", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    args.forward = list(argv)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
