r"""Side by side: the same env and matched PPO settings through our system, Sample Factory 2.1.1 (APPO)
and RLlib PPO (ray 2.60.0), back to back in ONE invocation, N repeats, medians and ratios.

    .venv/bin/python benchmarks/side_by_side.py --env cartpole --seconds 60 --repeats 3
    .venv/bin/python benchmarks/side_by_side.py --env cartpole --systems ours,ours-impala,ours-sync,sample_factory,rllib
    .venv/bin/python benchmarks/side_by_side.py --env pong --seconds 120 --repeats 3 \
        --systems ours,ours-bf16,sample_factory,rllib
    .venv/bin/python benchmarks/side_by_side.py --env pong --systems ours,ours@28f88e3,sample_factory,rllib
    .venv/bin/python benchmarks/side_by_side.py --env halfcheetah --seconds 60 --repeats 3 \
        --systems ours,sample_factory,rllib
    .venv/bin/python benchmarks/side_by_side.py --env cartpole --show-settings  # the matched settings; runs nothing
    .venv/bin/python benchmarks/side_by_side.py --env cartpole --metric time-to-target --seeds 1,2,3,4,5 \
        --systems ours,sample_factory,rllib

The baselines run in their own virtualenvs, benchmarks/.venvs/{sample_factory,rllib}, which this
script creates on first use with benchmarks/baselines/setup.sh (torch==2.13.0 there too; about 2 min
and 3.3 GB the first time, a few seconds' import check after that). Only ratios measured in the
same invocation mean anything on a shared machine whose speed drifts: each repeat runs every system
once, in the order given, one at a time (never two at once), and the ratio of medians is reported
together with the per-repeat ratios.

Figure compared: training throughput = env frames consumed by the learner per second (Atari frames
= agent steps x 4), over the steady part of each run: the first --warmup seconds after the system is
up are left out, and so is start-up (our rendezvous, Sample Factory's process start, RLlib's
Ray/Algorithm build). Ours: benchmarks/throughput.py's measure() (metrics.csv rows after the
warmup). Sample Factory: its learner's env-step counter sampled after every training iteration.
RLlib: its lifetime env-step counter after every algo.train() (sync PPO: every sampled step is
trained on). Each baseline's runner docstring says exactly what it runs and measures.

Matched settings (SETTINGS below, any of them can be overridden by flag): 2 sampling processes,
envs per process, rollout (our segment length), batch (agent steps per training batch), epochs,
minibatch size, network (and whether the value head shares the policy's torso: --separate-critic gives
each system's critic a torso of its own, our model.separate_critic, Sample Factory's
--actor_critic_share_weights=False, RLlib's vf_share_layers=False), lr, gamma, GAE lambda, clip, entropy and
value coefficients, grad-norm clip. They translate into our overrides (workers.actor.count, .ring_size,
.segment_length, workers.trainer.batch_segments = batch / rollout, algorithm.epochs, algorithm.minibatches =
batch / minibatch, model.hidden_sizes, algorithm.*) and into each runner's flags. Our system runs as
2 actor processes + 1 policy worker + 1 trainer + 1 controller ("ours"), or as one of the variants in
OURS: choices of our system that leave the matched settings alone: "ours-impala" (inference inside the
actors, no policy worker), "ours-bf16" (forward passes under bf16 autocast; the baselines run fp32),
"ours-sync" (env.backend=sync: gymnasium envs stepped one by one in a loop, as the baselines do; "ours"
uses env.backend=auto, i.e. gymnasium's numpy CartPoleVectorEnv or ALE's C++ AtariVectorEnv with the
same preprocessing settings). Each variant is compared with each baseline. "ours@REV" is our system as
it was at git revision REV (a worktree under benchmarks/.worktrees, run by that revision's own
benchmarks/throughput.py with the same overrides), so a change is measured against the code before it
and against the baselines in the same invocation; the ratio "ours/ours@REV" says what the change did. What
cannot be matched exactly: Sample Factory is asynchronous APPO (ours is asynchronous too; RLlib's PPO is
synchronous); RLlib's value and policy heads each get their own 512 layer on Pong (ours and Sample Factory's
share one);
RLlib's default CNN does not scale pixels. On Pong all three use ALE/Pong-v5 (sticky actions) with
gymnasium's AtariPreprocessing (frame skip 4 with max-pool, 84x84 gray, noop starts) and a stack of
4, not RLlib's own 64x64 Atari wrapper.

HalfCheetah (--env halfcheetah: Box actions, experiments/halfcheetah_ppo.yaml): 2 workers x 4 envs, rollout
256, batch 2048, 10 epochs of minibatch 64, lr 3e-4 (constant for all three), MLP 64-64 tanh with a separate
critic, a Gaussian policy with a state-independent log-std, gamma 0.99, lambda 0.95, clip 0.2, entropy 0,
value coefficient 0.5, grad-norm clip 0.5, and two settings on for all three: observation normalisation
(ours: algorithm.normalize_observations, running statistics the trainer keeps and publishes with the weights;
Sample Factory: --normalize_input=True; RLlib: the MeanStdFilter env-to-module connector) and reward scaling
(ours: algorithm.scale_rewards; Sample Factory: --normalize_returns=True; RLlib: gymnasium's NormalizeReward
wrapper on each env). mujoco 3.3.0 everywhere; Sample Factory's gymnasium 0.29.1 registers HalfCheetah-v4,
not -v5 (the same model, reward and frame skip). Frames are agent steps (each is 5 MuJoCo physics steps,
not counted). Not matched: value-loss clipping (see MATCHING). Sample Factory runs a rollout of 64 (its
minibatches are whole trajectories, so its rollout may not exceed the minibatch of 64; the batch stays 2048).

--metric time-to-target (CartPole): each system runs once per seed (--seeds; seed order outer, systems
inner) until the mean return of its last 20 episodes reaches 475 (--target-return, --return-window),
within a budget of --seconds (default 300 here) from when the system is up; the figure is the seconds
from up to that moment (ours: the controller's wall time from rendezvous to the stop decision; Sample
Factory: from its runner's start to the first learner iteration that sees the target; RLlib: from the
built Algorithm to the first algo.train() result that does). Start-up is reported apart (startup_s).
A run that misses the target counts as slower than the budget in the median. The ratio
"VARIANT/BASELINE" is then the baseline's median seconds over ours (above 1: ours gets there sooner).

The last line on stdout is JSON: {"env", "seconds", "repeats", "settings", "systems": {name:
{"median_training_fps", "median_sampling_fps", "runs": [...]}}, "ratios": {key: ours/theirs},
"ratios_per_repeat": {...}, "notes"}; ratio keys are "VARIANT/BASELINE" (and "ours/ours@REV").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINES = HERE / "baselines"
VENVS = HERE / ".venvs"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(BASELINES))

import common  # noqa: E402  (benchmarks/baselines/common.py: standard library only)

# Our system as configured by the experiment, and variants of it: choices of our system (placement,
# precision), never of the matched settings. Every variant is compared with every baseline.
OURS = {
    "ours": [],
    "ours-impala": ["workers.placement=impala", "workers.policy.count=0"],  # inference inside the actors
    "ours-bf16": ["workers.trainer.precision=bf16", "workers.policy.precision=bf16"],  # bf16 autocast forwards
    "ours-sync": ["env.backend=sync"],
}  # gymnasium envs stepped one by one, as the baselines step them
SYSTEMS = (*OURS, "sample_factory", "rllib")
WORKTREES = HERE / ".worktrees"  # ours@REV: one git worktree per revision, made on first use


def is_ours(system: str) -> bool:
    return system in OURS or system.startswith("ours@")


RUNNERS = {"sample_factory": BASELINES / "sample_factory_run.py", "rllib": BASELINES / "rllib_run.py"}

# One dict per env. num_workers x envs_per_worker x rollout == batch_size, so synchronous samplers
# (RLlib, Sample Factory --sync) collect exactly one batch per round.
SETTINGS = {
    "cartpole": dict(
        experiment="experiments/cartpole_ppo.yaml",
        num_workers=2,
        envs_per_worker=16,
        rollout=64,
        batch_size=2048,
        epochs=4,
        minibatch_size=512,
        hidden=[64, 64],
        lr=1e-3,
        gamma=0.99,
        gae_lambda=0.95,
        clip=0.2,
        entropy_coef=0.0,
        value_coef=0.5,
        max_grad_norm=0.5,
        separate_critic=False,
        normalize_observations=False,
        scale_rewards=False,
    ),
    "pong": dict(
        experiment="experiments/atari_pong_ppo.yaml",
        num_workers=2,
        envs_per_worker=8,
        rollout=128,
        batch_size=2048,
        epochs=4,
        minibatch_size=512,
        hidden=None,
        lr=2.5e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip=0.1,
        entropy_coef=0.01,
        value_coef=0.5,
        max_grad_norm=0.5,
        separate_critic=False,
        normalize_observations=False,
        scale_rewards=False,
    ),
    # The standard continuous-control PPO recipe (CleanRL's, SB3's) of experiments/halfcheetah_ppo.yaml, with
    # a constant lr (the baselines do not anneal it the same way) and 2 workers x 4 envs x 256 steps = 2048.
    "halfcheetah": dict(
        experiment="experiments/halfcheetah_ppo.yaml",
        num_workers=2,
        envs_per_worker=4,
        rollout=256,
        batch_size=2048,
        epochs=10,
        minibatch_size=64,
        hidden=[64, 64],
        lr=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip=0.2,
        entropy_coef=0.0,
        value_coef=0.5,
        max_grad_norm=0.5,
        separate_critic=True,
        normalize_observations=True,
        scale_rewards=True,
    ),
}
TARGETS = {"cartpole": 475.0}  # time-to-target: mean return over the last --return-window episodes
NETWORK = {
    "cartpole": "MLP {hidden} tanh",
    "pong": "NatureCNN (32x8/4, 64x4/2, 64x3/1) + fc 512, ReLU",
    "halfcheetah": "MLP {hidden} tanh, Gaussian policy with a state-independent log-std",
}
MATCHING = {  # what the "matching" note of the JSON says about each env
    "cartpole": "CartPole-v1, same MLP for all three",
    "pong": "same ALE/Pong-v5 84x84 gray, skip 4 max-pool, stack 4 preprocessing for all three (not RLlib's 64x64 "
    "wrapper); RLlib has separate 512 heads for pi and vf",
    "halfcheetah": "HalfCheetah-v5 (Sample Factory: -v4 under its gymnasium 0.29.1, the same model, reward and frame "
    "skip), mujoco 3.3.0 for all three; frames = agent steps (MuJoCo's 5 physics steps per agent step "
    "not counted); Box actions, Gaussian with a state-independent log-std, actions clipped to the "
    "bounds; MLP 64-64 tanh for the policy and a separate one for the critic; observations normalised "
    "by running mean/std (ours: trainer statistics; SF: normalize_input; RLlib: MeanStdFilter "
    "connector) and rewards scaled by a running std of the discounted return (ours: scale_rewards; "
    "SF: normalize_returns, the return targets themselves; RLlib: gymnasium's NormalizeReward per "
    "env); value-loss clipping not matched (ours: clipped at clip_coef; SF: ppo_clip_value 1.0 on "
    "normalised returns; RLlib: vf_clip_param 10 on the squared error)",
}


def network_of(env: str, s: dict) -> str:
    return NETWORK[env].format(hidden=s["hidden"]) + (
        ", a separate critic torso" if s["separate_critic"] else ", shared actor-critic torso"
    )


def our_overrides(s: dict) -> list[str]:
    if s["batch_size"] % s["rollout"]:
        raise SystemExit(f"batch size {s['batch_size']} must be a multiple of rollout {s['rollout']} for our trainer")
    out = [
        f"workers.actor.count={s['num_workers']}",
        f"workers.actor.ring_size={s['envs_per_worker']}",
        f"workers.actor.segment_length={s['rollout']}",
        f"workers.trainer.batch_segments={s['batch_size'] // s['rollout']}",
        f"algorithm.epochs={s['epochs']}",
        f"algorithm.minibatches={s['batch_size'] // s['minibatch_size']}",
        f"algorithm.lr={s['lr']}",
        "algorithm.anneal_lr=false",
        f"algorithm.gamma={s['gamma']}",
        f"algorithm.gae_lambda={s['gae_lambda']}",
        f"algorithm.clip_coef={s['clip']}",
        f"algorithm.entropy_coef={s['entropy_coef']}",
        f"algorithm.value_coef={s['value_coef']}",
        f"algorithm.max_grad_norm={s['max_grad_norm']}",
        "workers.policy.count=1",
        "workers.trainer.count=1",
    ]
    if s["hidden"]:
        out.append(f"model.hidden_sizes=[{','.join(map(str, s['hidden']))}]")
    if s["separate_critic"]:  # the experiments share the torso by default (and ours@REV before it lack the key)
        out.append("model.separate_critic=true")
    for key in ("normalize_observations", "scale_rewards"):  # likewise: only when on (older revisions lack them)
        if s[key]:
            out.append(f"algorithm.{key}=true")
    return out


def runner_args(env: str, s: dict, seconds: float, warmup: float) -> list[str]:
    args = [
        "--env",
        env,
        "--seconds",
        str(seconds),
        "--warmup",
        str(warmup),
        "--num-workers",
        str(s["num_workers"]),
        "--envs-per-worker",
        str(s["envs_per_worker"]),
        "--rollout",
        str(s["rollout"]),
        "--batch-size",
        str(s["batch_size"]),
        "--epochs",
        str(s["epochs"]),
        "--minibatch-size",
        str(s["minibatch_size"]),
        "--lr",
        str(s["lr"]),
        "--gamma",
        str(s["gamma"]),
        "--gae-lambda",
        str(s["gae_lambda"]),
        "--clip",
        str(s["clip"]),
        "--entropy-coef",
        str(s["entropy_coef"]),
        "--value-coef",
        str(s["value_coef"]),
        "--max-grad-norm",
        str(s["max_grad_norm"]),
    ]
    if s["hidden"]:
        args += ["--hidden", *map(str, s["hidden"])]
    if s["separate_critic"]:
        args.append("--separate-critic")
    if s["normalize_observations"]:
        args.append("--normalize-observations")
    if s["scale_rewards"]:
        args.append("--scale-rewards")
    return args


# ------------------------------------------------------------------------------------------- running


def run_ours(system: str, env: str, s: dict, seconds: float, warmup: float, out: Path, extra: list[str]) -> dict:
    import throughput  # benchmarks/throughput.py

    from srl_hpc import config

    overrides = our_overrides(s) + OURS[system] + extra
    exp = config.with_overrides(config.load(ROOT / s["experiment"]), overrides)
    out.mkdir(parents=True, exist_ok=True)
    try:
        r = throughput.measure(exp, seconds, warmup, out)
    except SystemExit as e:  # measure() exits with the run's log when the run fails
        return {"system": system, "env": env, "training_fps": None, "error": str(e)[-2000:]}
    steady = r.get("steady_training_fps")
    return {
        "system": system,
        "env": env,
        "training_fps": steady if steady is not None else r["training_fps"],
        "sampling_fps": r.get("steady_sampling_fps") or r["sampling_fps"],
        "whole_run_training_fps": r["training_fps"],
        "seconds": r["seconds"],
        "run_dir": r["run_dir"],
        "frames_dropped": r.get("frames_dropped"),
        "trainer_busy_fraction": r.get("trainer_busy_fraction"),
        "actor_rss_mb_max": r.get("actor_rss_mb_max"),
        "actor_startup_s_max": r.get("actor_startup_s_max"),
        **policy_figures(r),
        "notes": (
            "steady part of metrics.csv (rows after warmup)"
            if steady is not None
            else "whole run (too few metrics rows after warmup)"
        )
        + "; overrides: "
        + " ".join(overrides),
    }


def run_ours_to_target(
    system: str, env: str, s: dict, seed: int, target: tuple[float, int], budget: float, out: Path, extra: list[str]
) -> dict:
    import time_to_target  # benchmarks/time_to_target.py

    from srl_hpc import config

    overrides = (
        our_overrides(s)
        + OURS[system]
        + extra
        + [
            f"stop.target_return={target[0]}",
            f"stop.return_window={target[1]}",
            f"stop.wall_time={budget}",
            "stop.env_frames=null",
            "stop.target_eval_return=null",
        ]
    )
    exp = config.with_overrides(config.load(ROOT / s["experiment"]), overrides)
    r = time_to_target.run_seed(exp, seed, out)
    return {
        "system": system,
        "env": env,
        "seed": seed,
        "seconds_to_target": r["seconds"] if r["reached"] else None,
        "steps_to_target": r["env_frames"] if r["reached"] else None,
        "mean_return_at_stop": r["mean_return_at_stop"],
        "run_dir": r["run_dir"],
        "notes": "seconds: the controller's wall time from rendezvous to the stop decision; "
        "overrides: " + " ".join(overrides),
    }


def run_ours_at(system: str, env: str, s: dict, seconds: float, warmup: float, out: Path, extra: list[str]) -> dict:
    """ours@REV: that revision's throughput.py in its own worktree (its srl_hpc first on the path), with
    today's matched overrides (a revision whose config lacks one of them fails, with its error)."""
    rev = system.split("@", 1)[1]
    tree = WORKTREES / rev
    if not tree.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True
        )
    overrides = our_overrides(s) + extra
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/throughput.py",
            s["experiment"],
            "--seconds",
            str(seconds),
            "--warmup",
            str(warmup),
            "--run-dir",
            str(out),
            *(f"--set={o}" for o in overrides),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return {"system": system, "env": env, "training_fps": None, "error": (proc.stdout + proc.stderr)[-2000:]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    steady = r.get("steady_training_fps")
    if "policy_cpu_us_per_request" not in r:  # a revision before that figure: today's analysis of its traces
        import throughput

        r.update(throughput.from_traces(Path(r["run_dir"]), warmup))
    return {
        "system": system,
        "env": env,
        "training_fps": steady if steady is not None else r["training_fps"],
        "sampling_fps": r.get("steady_sampling_fps") or r["sampling_fps"],
        "whole_run_training_fps": r["training_fps"],
        "seconds": r["seconds"],
        "run_dir": r["run_dir"],
        "frames_dropped": r.get("frames_dropped"),
        **policy_figures(r),
        "notes": f"revision {rev} in {tree}; overrides: " + " ".join(overrides),
    }


def policy_figures(r: dict) -> dict:
    """What serving one inference request cost the policy workers (from the run's traces)."""
    return {k: r.get(k) for k in ("policy_cpu_us_per_request", "policy_forward_us_per_request")}


def run_baseline(
    system: str, env: str, s: dict, seconds: float, warmup: float, out: Path, more: list[str] = ()
) -> dict:
    python = VENVS / system / "bin" / "python"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(python), str(RUNNERS[system])] + runner_args(env, s, seconds, warmup) + ["--work-dir", str(out), *more]
    log_path = out / "stderr.log"
    limit = seconds + 600  # start-up of Ray / Sample Factory and their shutdown
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, text=True
        )
        try:
            stdout, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            stdout = ""
        finally:
            how = common.stop_group(proc.pid, proc, grace=10.0)  # nothing of theirs outlives the run
    lines = [ln for ln in (stdout or "").splitlines() if ln.startswith("{")]
    if not lines:
        tail = log_path.read_text(errors="replace")[-2000:]
        return {
            "system": system,
            "env": env,
            "training_fps": None,
            "error": f"exit {proc.returncode}, no result line ({how}); stderr tail:\n{tail}",
        }
    r = json.loads(lines[-1])
    r["stderr"] = str(log_path)
    if "processes still left" in how:
        r["notes"] = r.get("notes", "") + "; WARNING: processes were left after the runner exited"
    return r


def ensure_venvs(systems: list[str]) -> None:
    need = [s for s in systems if s in RUNNERS]
    if need:
        common.log(f"checking the baseline venvs ({', '.join(need)}); creating any that is missing")
        if subprocess.call(["bash", str(BASELINES / "setup.sh"), *need], stdout=sys.stderr) != 0:
            raise SystemExit("benchmarks/baselines/setup.sh failed")


def describe(s: dict, network: str) -> str:
    return (
        f"{s['num_workers']} workers x {s['envs_per_worker']} envs, rollout {s['rollout']}, "
        f"batch {s['batch_size']}, {s['epochs']} epochs x minibatch {s['minibatch_size']}, {network}, "
        f"lr {s['lr']:g}"
    )


def median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 1) if xs else None


def compare_time_to_target(args, systems: list[str], s: dict, network: str, out: Path) -> int:
    """Each seed, each system in turn, until the target or the budget: seconds from up to target."""
    if any(x.startswith("ours@") for x in systems):
        raise SystemExit("time-to-target runs today's code only: drop the ours@REV systems")
    target = args.target_return if args.target_return is not None else TARGETS.get(args.env)
    if target is None:
        raise SystemExit(f"no default target for {args.env}: pass --target-return")
    seeds = [int(x) for x in args.seeds.split(",")]
    common.log(
        f"{args.env}: time to mean return {target:g} over {args.return_window} episodes, {', '.join(systems)} "
        f"x seeds {seeds}, budget {args.seconds:g}s each, settings {s}; output under {out}"
    )
    runs: dict[str, list[dict]] = {x: [] for x in systems}
    for seed in seeds:
        for system in systems:
            where = out / f"{system}-seed{seed}"
            t = time.time()
            if system in OURS:
                r = run_ours_to_target(
                    system, args.env, s, seed, (target, args.return_window), args.seconds, where, args.set
                )
            else:
                r = run_baseline(
                    system,
                    args.env,
                    s,
                    args.seconds,
                    0.0,
                    where,
                    ["--seed", str(seed), "--target-return", str(target), "--return-window", str(args.return_window)],
                )
            r.setdefault("seed", seed)
            runs[system].append(r)
            took = r.get("seconds_to_target")
            outcome = (
                f"target in {took:.1f}s"
                if took is not None
                else f"NOT reached within {args.seconds:g}s {r.get('error', '')[:300]}"
            )
            common.log(f"seed {seed}: {system}: {outcome} ({time.time() - t:.0f}s wall)")
            time.sleep(2.0)  # let the last run's processes go before the next one starts

    def seconds(r):  # a run that missed the target took longer than the budget
        return r["seconds_to_target"] if r.get("seconds_to_target") is not None else float("inf")

    result = {
        "env": args.env,
        "metric": "time-to-target",
        "target_return": target,
        "return_window": args.return_window,
        "budget_seconds": args.seconds,
        "seeds": seeds,
        "settings": s,
        "network": network,
        "systems": {},
        "ratios": {},
    }
    for system, rs in runs.items():
        med = statistics.median(seconds(r) for r in rs)
        result["systems"][system] = {
            "median_seconds_to_target": None if med == float("inf") else round(med, 1),
            "reached": sum(r.get("seconds_to_target") is not None for r in rs),
            "runs": rs,
        }
    for mine in (x for x in systems if x in OURS):
        for other in (x for x in systems if x not in OURS):
            ours, theirs = (statistics.median(seconds(r) for r in runs[x]) for x in (mine, other))
            ratio = theirs / ours if ours != float("inf") and theirs != float("inf") else None
            result["ratios"][f"{mine}/{other}"] = None if ratio is None else round(ratio, 2)

    print(
        f"\ntime to target: {args.env}, mean return >= {target:g} over {args.return_window} episodes, seeds {seeds}, "
        f"budget {args.seconds:g}s; {describe(s, network)}"
    )
    print(f"{'system':<16}{'median s':>10}{'reached':>9}  per seed (s to target)")
    for system in systems:
        d = result["systems"][system]
        each = ", ".join(
            f"{r['seconds_to_target']:.1f}" if r.get("seconds_to_target") is not None else "-" for r in d["runs"]
        )
        med = d["median_seconds_to_target"]
        print(
            f"{system:<16}{(f'{med:.1f}' if med is not None else f'>{args.seconds:g}'):>10}"
            f"{d['reached']:>6}/{len(seeds)}  {each}"
        )
    for key, ratio in result["ratios"].items():
        print(
            f"{key}: "
            + (f"{ratio:.2f}x sooner" if ratio is not None else "n/a (a median missed the target)")
            + " (their median seconds / ours)"
        )
    print(json.dumps(result))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=sorted(SETTINGS), required=True)
    p.add_argument(
        "--seconds",
        type=float,
        help="timed window of each run (time-to-target: the budget of each run); default 60 (time-to-target 300)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds of each window left out of the figures (default: min(10, seconds/4))",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--metric", choices=("throughput", "time-to-target"), default="throughput")
    p.add_argument("--seeds", default="1,2,3,4,5", help="time-to-target: one run per seed and system")
    p.add_argument("--target-return", type=float, help="time-to-target: the target (default: the env's, CartPole 475)")
    p.add_argument("--return-window", type=int, default=20, help="time-to-target: episodes in the mean return")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, from {','.join(SYSTEMS)}")
    p.add_argument("--out", type=Path, help="keep run directories and logs here (default: a temporary directory)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra override for OUR experiment only (not matched in the baselines)",
    )
    p.add_argument(
        "--show-settings", action="store_true", help="print the matched settings and each command, run nothing"
    )
    for key in ("num_workers", "envs_per_worker", "rollout", "batch_size", "epochs", "minibatch_size"):
        p.add_argument("--" + key.replace("_", "-"), type=int, help="override the matched setting")
    for key in ("lr", "gamma", "gae_lambda", "clip", "entropy_coef", "value_coef", "max_grad_norm"):
        p.add_argument("--" + key.replace("_", "-"), type=float, help="override the matched setting")
    p.add_argument("--hidden", type=int, nargs="+", help="override the MLP widths (cartpole, halfcheetah)")
    p.add_argument(
        "--separate-critic",
        action="store_true",
        default=None,
        help="every system's value head gets a torso of its own (default: shared with the policy)",
    )
    args = p.parse_args(argv)

    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    bad = [x for x in systems if x not in SYSTEMS and not x.startswith("ours@")]
    if bad or not systems:
        p.error(f"unknown system(s) {bad}; choose from {','.join(SYSTEMS)} or ours@REV (a git revision)")
    s = dict(SETTINGS[args.env])
    for key in s:
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    if s["batch_size"] % s["minibatch_size"]:
        p.error("minibatch size must divide the batch size")
    if args.seconds is None:
        args.seconds = 300.0 if args.metric == "time-to-target" else 60.0
    warmup = args.warmup if args.warmup is not None else min(10.0, args.seconds / 4)
    network = network_of(args.env, s)
    if args.show_settings:
        print(
            json.dumps({"env": args.env, "settings": s, "network": network, "matching": MATCHING[args.env]}, indent=1)
        )
        for system in OURS:
            print(
                f"{system}: --set "
                + " --set ".join(our_overrides(s) + OURS[system] + args.set)
                + f"  ({s['experiment']})"
            )
        for system in RUNNERS:
            print(
                f"{system}: {VENVS / system / 'bin/python'} {RUNNERS[system]} "
                + " ".join(runner_args(args.env, s, args.seconds, warmup))
            )
        return 0
    if any(is_ours(x) for x in systems) and not (ROOT / s["experiment"]).exists():
        raise SystemExit(f"{s['experiment']} does not exist (yet): run without 'ours' or add it")
    ensure_venvs(systems)

    out = args.out or Path(tempfile.mkdtemp(prefix=f"side-by-side-{args.env}-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.metric == "time-to-target":
        return compare_time_to_target(args, systems, s, network, out)
    common.log(
        f"{args.env}: {', '.join(systems)} x {args.repeats} repeats of {args.seconds:g}s "
        f"(warmup {warmup:g}s), settings {s}; output under {out}"
    )
    runs: dict[str, list[dict]] = {x: [] for x in systems}
    for rep in range(args.repeats):
        for system in systems:
            where = out / f"{system}-{rep + 1}"
            common.log(f"repeat {rep + 1}/{args.repeats}: {system} ...")
            t = time.time()
            if system in OURS:
                r = run_ours(system, args.env, s, args.seconds, warmup, where, args.set)
            elif is_ours(system):
                r = run_ours_at(system, args.env, s, args.seconds, warmup, where, args.set)
            else:
                r = run_baseline(system, args.env, s, args.seconds, warmup, where)
            r["repeat"] = rep + 1
            r["started"] = time.strftime("%H:%M:%S", time.localtime(t))
            runs[system].append(r)
            fps = r.get("training_fps")
            common.log(
                f"repeat {rep + 1}/{args.repeats}: {system}: training "
                + (f"{fps:,.0f} frames/s" if fps is not None else f"FAILED: {r.get('error', '')[:500]}")
                + f" ({time.time() - t:.0f}s wall)"
            )
            time.sleep(2.0)  # let the last run's processes go before the next one starts

    result = {
        "env": args.env,
        "seconds": args.seconds,
        "warmup": warmup,
        "repeats": args.repeats,
        "settings": s,
        "network": network,
        "systems": {},
        "ratios": {},
        "ratios_per_repeat": {},
        "notes": {
            "frames": "env frames consumed by the learner per second over the steady part of each run; "
            "Atari frames = agent steps x 4",
            "matching": "SF: APPO async, no V-trace/RNN"
            + ("" if s["normalize_observations"] else "/normalisation")
            + "; RLlib: sync PPO (new API stack); "
            + MATCHING[args.env],
        },
    }
    for system, rs in runs.items():
        result["systems"][system] = {
            "median_training_fps": median(r.get("training_fps") for r in rs),
            "median_sampling_fps": median(r.get("sampling_fps") for r in rs),
            "runs": rs,
        }
        if is_ours(system):
            result["systems"][system]["median_policy_cpu_us_per_request"] = median(
                r.get("policy_cpu_us_per_request") for r in rs
            )
    pairs = [(mine, other) for mine in systems if is_ours(mine) for other in systems if not is_ours(other)]
    pairs += [("ours", x) for x in systems if x.startswith("ours@") and "ours" in systems]  # what a change did
    for mine, other in pairs:
        key = f"{mine}/{other}"
        ours, theirs = (result["systems"][x]["median_training_fps"] for x in (mine, other))
        result["ratios"][key] = round(ours / theirs, 2) if ours and theirs else None
        result["ratios_per_repeat"][key] = [
            round(a["training_fps"] / b["training_fps"], 2) if a.get("training_fps") and b.get("training_fps") else None
            for a, b in zip(runs[mine], runs[other])
        ]

    # the table (stderr keeps stdout to the one JSON line... plus this table, which people read)
    print(
        f"\nside by side: {args.env}, {args.repeats} x {args.seconds:g}s (warmup {warmup:g}s), {describe(s, network)}"
    )
    print(f"{'system':<16}{'median train fps':>18}{'median sample fps':>19}  per repeat (train fps)")
    for system in systems:
        d = result["systems"][system]
        each = ", ".join(
            f"{r['training_fps']:,.0f}" if r.get("training_fps") is not None else "failed" for r in d["runs"]
        )
        med, smp = d["median_training_fps"], d["median_sampling_fps"]
        print(
            f"{system:<16}{(f'{med:,.0f}' if med is not None else 'n/a'):>18}"
            f"{(f'{smp:,.0f}' if smp is not None else 'n/a'):>19}  {each}"
        )
    for system in filter(is_ours, systems):
        cost = result["systems"][system]["median_policy_cpu_us_per_request"]
        if cost is not None:
            print(
                f"{system}: policy workers' CPU per inference request {cost:.0f} us (median; per repeat "
                + ", ".join(f"{r.get('policy_cpu_us_per_request')}" for r in runs[system])
                + ")"
            )
    for key, ratio in result["ratios"].items():
        per = ", ".join("n/a" if x is None else f"{x:.2f}" for x in result["ratios_per_repeat"][key])
        print(f"{key}: {'n/a' if ratio is None else f'{ratio:.2f}'} (ratio of medians; per repeat {per})")
    print(json.dumps(result))
    failed = [f"{r['system']}#{r['repeat']}" for rs in runs.values() for r in rs if r.get("training_fps") is None]
    if failed:
        common.log(f"failed runs: {', '.join(failed)} (see 'error' in the JSON)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
