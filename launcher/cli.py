# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this line)
"""`srl-launch`: run an experiment locally or on Slurm, validate it, follow or stop a run."""
from __future__ import annotations

import argparse
import difflib
import os
import shlex
import signal
import sys
from pathlib import Path

from argcomplete.completers import DirectoriesCompleter, FilesCompleter

from launcher import doctor, local, overrides, plan, runs, slurm, status, sweep, trials, tune
from srl_hpc import config, graph as wiring
from srl_hpc.config import spaces_check
from srl_hpc.config.loader import key_lines
from launcher.settings import add_profile_option, profile_files
from srl_hpc import __version__
from srl_hpc.completion import complete
from srl_hpc.rundir import RunDir

USAGE = """\
srl-launch [run] EXPERIMENT.yaml [KEY=VALUE...] [options]  run every worker here (local mode); KEY=VALUE: --set
srl-launch EXPERIMENT.yaml --slurm [--follow]   submit one heterogeneous Slurm job
srl-launch EXPERIMENT.yaml --slurm --dry-run    print the sbatch script; submit nothing
srl-launch EXPERIMENT.yaml --slurm --seeds 1,2,3  a sweep: one submitit job array, one node per seed
srl-launch EXPERIMENT.yaml --sweep algorithm.lr=1e-3,3e-4 --seeds 1,2,3  a grid sweep (here, or with --slurm)
srl-launch prepare EXPERIMENT.yaml --run-dir R   write R (keys, experiment, R/job.sbatch) to sbatch by hand
srl-launch validate EXPERIMENT.yaml... [KEY=VALUE...]  check files (--seed, --set as for a run); run nothing
srl-launch doctor [EXPERIMENT.yaml] [--probe]  check this node before a first submission (--probe: a small test job)
srl-launch graph EXPERIMENT.yaml...         print the workers, their handlers and het groups, and the streams
srl-launch tune EXPERIMENT.yaml [--slurm] [--budget 600]   short measured runs choose placement, ring, threads...
srl-launch status RUN_DIR                   state, outcome, progress, failed workers of a run or sweep
srl-launch logs RUN_DIR [--worker actor/3] [-f]   a worker's log (default: the controller's)
srl-launch cancel RUN_DIR                   stop a run (scancel for Slurm runs; checkpoints are kept)
srl-launch resume RUN_DIR [--follow]        continue a stopped run from its checkpoint, in the same directory
srl-launch resume RUN_DIR --after JOBID | --chain K   queue continuation job(s) (no requeue needed)
srl-launch enjoy RUN_DIR [--episodes N] [--video out.mp4] [--greedy] [--tag best | --version N]   watch it play
srl-launch enjoy RUN_DIR --against one-ply [--games 200]   a self-play game's policy against a fixed player
srl-launch params RUN_DIR [--policy P] [--tag NAME=VERSION] [--untag NAME]   a run's stored versions and tags
srl-launch --version                        the installed version
srl-launch COMMAND --help                   a command's options"""

EXITS = """\
exit codes: 0 done (status: the run succeeded, or is pending or running); 1 the run failed, was cancelled or
timed out; 2 what was asked cannot be done as written (a usage error, an invalid experiment or one too big for
this machine, a file or run directory missing or already there); 3 Slurm refused or did not answer; 128+N a local
run stopped by signal N"""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch", usage=USAGE, description="Launch an srl-hpc experiment.")
    p.add_argument("experiment", type=Path, help="experiment YAML file")
    overrides.add(p)
    p.add_argument("--slurm", action="store_true", help="submit to Slurm instead of running here")
    p.add_argument("--dry-run", action="store_true", help="with --slurm: print the sbatch script, submit nothing")
    p.add_argument("--follow", action="store_true", help="with --slurm: stream progress, exit with the run's result")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--seeds", help="comma-separated seeds: one run per seed (a submitit job array with --slurm)")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help="a sweep over these values of KEY (repeatable: every combination), times --seeds; each "
                        "member is its own run directory, SWEEP/KEY=V/seed-N")
    p.add_argument("--sweep-set", action="append", default=[], metavar="'K1=V1 K2=V2'",
                   help="one configuration of a sweep given as a list (repeatable), times --seeds")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set workers.actor.ring_size=16 (repeatable)")
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: runs/<name>-<time>)")
    add_profile_option(p)
    return p


def _experiment(args):
    exp = config.load(args.experiment, profiles=profile_files(args.profile))
    if getattr(args, "seed", None) is not None:
        exp = config.replace(exp, seed=args.seed)
    if args.set:
        exp = config.with_overrides(exp, args.set)
    return exp


def _parse(p: argparse.ArgumentParser, argv, many: bool = False) -> argparse.Namespace:
    """p's arguments, its KEY=VALUE words moved to args.set (launcher.overrides); the other positional words are
    the experiment files: one, or with `many` one or more."""
    args = p.parse_intermixed_args(argv)
    files = overrides.take(args, [*(args.experiments if many else [args.experiment]), *args.overrides])
    if not files:
        raise UsageError("no experiment file given (a KEY=VALUE word overrides a field; it is not a file)")
    if many:
        args.experiments = files
    elif len(files) > 1:
        raise UsageError(f"{str(files[1])!r} is neither KEY=VALUE nor an option ({p.prog} takes one experiment "
                         f"file: {files[0]})")
    else:
        args.experiment = files[0]
    return args


def _checked_experiment(args):
    """_experiment, then the env's spaces against the algorithm (one throw-away env, no workers): what
    validate checks, before anything runs or is queued."""
    exp = _experiment(args)
    spaces_check.check(exp, str(args.experiment), key_lines(args.experiment, profile_files(args.profile)), args.set)
    return exp


def cmd_run(argv) -> int:
    args = _parse(_run_parser(), argv)
    exp = _checked_experiment(args)
    command = "srl-launch " + " ".join(shlex.quote(a) for a in argv)
    members = _sweep_points(exp, args)
    if args.dry_run:
        if not args.slurm:
            raise UsageError("--dry-run needs --slurm (local mode has nothing to submit)")
        return _dry_run(exp, args, command)
    if members:
        return _sweep(exp, members, args, command)
    if not args.slurm:
        local.check_fits(exp)
        exp, run = runs.create(exp, args.run_dir)
        code = local.run(exp, run)
        print(f"run directory: {run.root}")
        return code
    run_dir = runs.resolve(exp, args.run_dir)
    request = slurm.prepare(exp, run_dir, sys.executable, command)
    exp, run = runs.create(exp, run_dir)
    job_id = slurm.submit(request, run, command)
    print(f"submitted {_jobs_text(run, job_id)}; run directory {run.root}")
    print(f"  follow: srl-launch logs {run.root} -f    state: srl-launch status {run.root}    "
          f"stop: srl-launch cancel {run.root}")
    if not args.follow:
        return 0
    return _follow(run, job_id)


def _dry_run(exp, args, command) -> int:
    """The very request `--slurm` would submit (slurm.prepare), printed instead of sent."""
    if _sweep_points(exp, args):
        raise UsageError("--dry-run shows the hetjob script; sweeps (--seeds, --sweep, slurm.sweep's grid, sets "
                         "or seeds) go through submitit")
    run_dir = runs.resolve(exp, args.run_dir)
    request = slurm.prepare(config.replace(exp, run_dir=str(run_dir)), run_dir, sys.executable, command,
                            require_cluster=False)
    if request.checked:
        print(f"# note: not checked against a cluster ({request.checked})", file=sys.stderr)
    print(request.script, end="")
    return 0


def _jobs_text(run: RunDir, job_id: str) -> str:
    """'job 12', or with slurm.layout: jobs 'jobs 12 (trainer), 13 (policy), 14 (actor)'."""
    groups = slurm.group_jobs(run)
    return f"jobs {', '.join(f'{j} ({g})' for g, j in groups.items())}" if groups else f"job {job_id}"


def _follow(run: RunDir, job_id: str) -> int:
    log = run.log(wiring.CONTROLLER)
    position = 0

    def stream_progress():
        nonlocal position
        position = status.follow_file(log, position)

    slurm.wait(job_id, on_poll=stream_progress, run=run, say=print)  # print: pending reasons, state changes
    stream_progress()
    final, report = status.describe(run)
    print(report)
    groups = slurm.group_jobs(run)
    if final in ENDED_BADLY:
        print(status.why_it_ended(run) if groups else status.ended_badly(run, job_id))
    print(f"{_jobs_text(run, job_id)} ended: {final}")
    return 0 if final == "completed" else 1


def _sweep_points(exp, args) -> list[sweep.Point]:
    """The members of a sweep (--seeds, --sweep, --sweep-set, or else the experiment's slurm.sweep grid, sets
    and seeds), each one's experiment built and so checked now; none for a single run."""
    grid, sets, seeds = sweep.from_experiment(exp.slurm.sweep)
    if args.seeds or args.sweep or args.sweep_set:
        grid, sets, seeds = args.sweep, args.sweep_set, _parse_seeds(args.seeds) if args.seeds else []
    if not (grid or sets or seeds):
        return []
    try:
        members = sweep.points(sweep.configurations(grid, sets), seeds or [exp.seed])
    except sweep.SweepError as e:
        raise UsageError(str(e)) from None
    sweep.member_experiments(exp, members)
    return members


def _sweep(exp, members, args, command: str) -> int:
    sweep_dir = runs.resolve(exp, args.run_dir, suffix="-sweep")
    if not args.slurm:
        return _local_sweep(exp, members, sweep_dir, command)
    jobs = sweep.submit(exp, members, sweep_dir, command)
    print(f"submitted job array {jobs[0].job_id.split('_')[0]} ({len(jobs)} runs); sweep directory {sweep_dir}")
    if not args.follow:
        return 0
    failed = 0
    for p, job in zip(members, jobs):
        try:
            result = job.result()
            print(f"{p.label}: {result['status']}: {result['reason']} ({result['wall_time']}s)")
        except Exception as e:  # noqa: BLE001  submitit re-raises the member's error
            failed += 1
            print(f"{p.label}: failed: {str(e).strip().splitlines()[-1]}")
    return 1 if failed else 0


def _local_sweep(exp, members, sweep_dir: Path, command: str) -> int:
    """The members one after another on this machine; a signal (Ctrl-C, `srl-launch cancel SWEEP`) stops the
    member running and the sweep."""
    local.check_fits(exp)
    created = sweep.create_members(exp, members, sweep_dir)
    sweep.write_index(exp, sweep_dir, members, [run for _, run in created], command)
    codes = []
    for p, (member_exp, run) in zip(members, created):
        print(f"== {p.label}: {run.root}", flush=True)
        codes.append(local.run(member_exp, run))
        if codes[-1] >= 128:  # stopped by a signal: the rest of the sweep does not start
            print(f"sweep stopped at {p.label}; {len(members) - len(codes)} members not run")
            break
    print(f"sweep directory: {sweep_dir}")
    return max(codes)


def _prepare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch prepare",
                                description="Write a run directory that is ready to run (its keys, the resolved "
                                            "experiment and job.sbatch) and print the sbatch command; submit nothing.")
    p.add_argument("experiment", type=Path)
    overrides.add(p)
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: runs/<name>-<time>)")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    add_profile_option(p)
    return p


def cmd_prepare(argv) -> int:
    args = _parse(_prepare_parser(), argv)
    exp = _checked_experiment(args)
    command = "srl-launch prepare " + " ".join(shlex.quote(a) for a in argv)
    if exp.slurm.layout == "jobs":
        raise UsageError("prepare writes one job script to sbatch by hand; with slurm.layout: jobs a run is a job per "
                         "group, which `srl-launch EXP --slurm` submits together and ties together (RUN/slurm.json): "
                         "use that (--dry-run prints every group's script), or slurm.layout: hetjob")
    run_dir = runs.resolve(exp, args.run_dir)
    request = slurm.prepare(config.replace(exp, run_dir=str(run_dir)), run_dir, sys.executable, command,
                            require_cluster=False)
    if request.checked:
        print(f"# note: not checked against a cluster ({request.checked})", file=sys.stderr)
    exp, run = runs.create(exp, run_dir)
    run.job_script.write_text(request.script)
    print(f"sbatch {shlex.quote(str(run.job_script))}")
    return 0


def _validate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch validate",
                                description="Check an experiment file, and its algorithm against the env's spaces "
                                            "(built once here); run nothing.")
    p.add_argument("experiments", type=Path, nargs="+", metavar="experiment")
    _overrides(p)
    return p


def cmd_validate(argv) -> int:
    args = _parse(_validate_parser(), argv, many=True)
    for path in args.experiments:
        _checked_experiment(argparse.Namespace(**vars(args), experiment=path))
        print(f"{path}: ok")
    return 0


def _graph_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch graph",
                                description="Print an experiment's workers, task handlers, het groups and streams.")
    p.add_argument("experiments", type=Path, nargs="+", metavar="experiment")
    _overrides(p)
    return p


def cmd_graph(argv) -> int:
    args = _parse(_graph_parser(), argv, many=True)
    for i, path in enumerate(args.experiments):
        header = f"# {path}\n" if len(args.experiments) > 1 else ""
        exp = _experiment(argparse.Namespace(**vars(args), experiment=path))
        print(("\n" if i else "") + header + wiring.describe(wiring.build(exp)))
    return 0


def _overrides(p: argparse.ArgumentParser) -> None:
    """KEY=VALUE words, --seed and --set, meaning what they mean for a run."""
    overrides.add(p)
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, as when running (repeatable)")
    add_profile_option(p)


def _tune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch tune", description=(
        "Short measured runs (here, or each as a Slurm job with --slurm) choose the settings that change "
        "throughput but not the algorithm: placement, ring size, inference splits, actors and policy workers, "
        "max batch, torch threads, inference and trainer precision (bf16 rounds the forward passes; --skip "
        "them to keep fp32). The trace verdict of each trial (what bound it) decides "
        "which to try next. Writes the tuned experiment file, a comment on each changed key, and a table of "
        "every trial."))
    p.add_argument("experiment", type=Path)
    _overrides(p)
    p.add_argument("--slurm", action="store_true", help="each trial a Slurm job, on the nodes the run will use")
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole search (default 600)")
    p.add_argument("--seconds", type=float, default=20.0, help="each trial's measured run (default 20)")
    p.add_argument("--warmup", type=float, default=5.0,
                   help="seconds at a trial's start left out of its training frames/s (default 5)")
    p.add_argument("--keys", help="comma-separated knobs to search (default: all of them here; with --slurm, all "
                                  "but the process counts, workers.actor.count and workers.policy.count): "
                                  + ", ".join(tune.BY_KEY))
    p.add_argument("--skip", help="comma-separated knobs not to search (e.g. workers.policy.precision,"
                                  "workers.trainer.precision: fp32 arithmetic throughout)")
    p.add_argument("--min-gain", type=float, default=0.05,
                   help="how much faster than the best a setting must be, by the mean of its two trials against "
                        "the best's trial measured between them, to become the best; a knob's fastest value is "
                        "checked so when its trial comes within this of the best (default 0.05: 5 percent)")
    p.add_argument("--dir", type=Path, help="where the trials write (default: runs/<name>-tune-<time>)")
    p.add_argument("-o", "--output", type=Path, help="the tuned experiment file (default: beside the experiment, "
                                                      "EXPERIMENT.tuned.yaml; never overwritten)")
    return p


def cmd_tune(argv) -> int:
    args = _parse(_tune_parser(), argv)
    exp = _checked_experiment(args)
    keys = _knobs(args.keys, "--keys") if args.keys else tune.SLURM_KEYS if args.slurm else tuple(tune.BY_KEY)
    skip = _knobs(args.skip, "--skip") if args.skip else ()
    keys = tuple(k for k in keys if k not in skip)
    if not keys:
        raise UsageError("--keys and --skip leave no knob to search")
    if args.seconds <= args.warmup or args.budget < 3 * args.seconds:
        raise UsageError(f"--seconds ({args.seconds:g}) must exceed --warmup ({args.warmup:g}), and --budget "
                         f"({args.budget:g}) hold at least 3 trials")
    output = args.output or args.experiment.with_suffix(".tuned.yaml")
    if output.exists():
        raise FileExistsError(f"{output} exists; move it away or choose another --output")
    if not args.slurm:
        local.check_fits(exp)
    tune_dir = runs.resolve(exp, args.dir, suffix="-tune")
    if tune_dir.exists() and any(tune_dir.iterdir()):
        raise FileExistsError(f"{tune_dir} is not empty; choose another --dir")
    try:
        tune.tune(exp, args.experiment, tune_dir, output, keys=keys, seconds=args.seconds, warmup=args.warmup,
                  budget=args.budget, min_gain=args.min_gain, slurm=args.slurm, given=args.set)
    except trials.TrialFailed as e:
        print(f"srl-launch tune: {e}", file=sys.stderr)
        return e.code if e.code >= 128 else 1
    except KeyboardInterrupt:
        print(f"srl-launch tune: interrupted; each trial's run directory is in {tune_dir}", file=sys.stderr)
        return 130
    return 0


def _knobs(words: str, option: str) -> tuple[str, ...]:
    """A comma-separated list of tune's knobs, each checked."""
    keys = tuple(k.strip() for k in words.split(",") if k.strip())
    unknown = [k for k in keys if k not in tune.BY_KEY]
    if unknown or not keys:
        raise UsageError(f"{option}: {', '.join(unknown) or 'none given'} not among the knobs "
                         f"({', '.join(tune.BY_KEY)})")
    return keys


def _status_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch status", description="State and outcome of a run or sweep.")
    p.add_argument("run_dir", type=RunDir)
    return p


def cmd_status(argv) -> int:
    args = _status_parser().parse_args(argv)
    if args.run_dir.sweep.exists():
        members = sweep.members_of(args.run_dir)
        on_slurm = [m["job_id"] for m in members if "job_id" in m]
        states = slurm.job_states(on_slurm) if on_slurm else {}  # one squeue for the whole sweep
        sweeping = any(local.launcher_pid(RunDir(m["run_dir"])) for m in members if "job_id" not in m)
        codes = []
        for member in members:
            run = RunDir(member["run_dir"])
            if "job_id" in member:
                state, report = status.describe(run, states[member["job_id"]])
            elif run.summary.exists() or run.launcher_pid.exists():
                state, report = status.describe(run)
            else:
                state, report = ("pending", "waits for the members before it") if sweeping else \
                    ("not run", "the local sweep ended before this member started")
            print(f"== {sweep.label(member)}: {state}\n{report}\n")
            codes.append(_state_code(state))
        return max(codes, default=0)
    state, report = status.describe(args.run_dir)
    print(f"state: {state}\n{report}")
    if state in ENDED_BADLY and args.run_dir.slurm.exists():  # no job of the run is live: the last speaks for it
        print(status.why_it_ended(args.run_dir))
    return _state_code(state)


ENDED_BADLY = ("failed", "cancelled", "timeout")


def _state_code(state: str) -> int:
    """status's exit code: 1 for a run that ended without success, else 0 (succeeded, pending, running, unknown)."""
    return 1 if state in ENDED_BADLY else 0


def _logs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch logs", description="Print (or follow) one worker's log.")
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--worker", default=wiring.CONTROLLER, help="e.g. actor/3, trainer/0 (default: controller/0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    return p


def cmd_logs(argv) -> int:
    args = _logs_parser().parse_args(argv)
    log = args.run_dir.log(args.worker)
    if not args.follow:
        if not log.exists():
            raise UsageError(f"no log for {args.worker} in {args.run_dir.logs} (workers: "
                             f"{', '.join(sorted(x.stem for x in args.run_dir.logs.glob('*.log')))})")
        print(log.read_text(errors="replace"), end="")
        return 0
    status.tail_forever(log, stop=_finished(args.run_dir))
    return 0


def _finished(run: RunDir):
    """`logs -f`'s stop test (status.ended); the job's pending reason and state changes go to stderr."""
    return status.ended(run, say=lambda line: print(line, file=sys.stderr, flush=True))


def _cancel_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch cancel", description="Stop a run; checkpoints are kept.")
    p.add_argument("run_dir", type=RunDir)
    return p


def cmd_cancel(argv) -> int:
    args = _cancel_parser().parse_args(argv)
    if args.run_dir.sweep.exists():
        members = sweep.members_of(args.run_dir)
        if all("job_id" in m for m in members):
            slurm.cancel(*(m["job_id"] for m in members))  # one scancel for the whole sweep
            print(f"cancelled the sweep's {len(members)} jobs")
            return 0
        # a local sweep runs its members in one launcher, one after another: stopping it stops the sweep
        pids = {local.launcher_pid(RunDir(m["run_dir"])) for m in members} - {None}
        if not pids:
            raise UsageError(f"{args.run_dir.root} is a local sweep with no member running")
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        print(f"sent SIGTERM to the sweep's local launcher (pid {', '.join(map(str, sorted(pids)))})")
        return 0
    if args.run_dir.slurm.exists():
        job_ids = slurm.cancel_run(args.run_dir)  # with the continuations queued after it
        print(f"cancelled job {', '.join(job_ids)}")
        return 0
    pid = local.launcher_pid(args.run_dir)
    if pid is None:
        raise UsageError(f"{args.run_dir.root} has no running local launcher")
    os.kill(pid, signal.SIGTERM)
    print(f"sent SIGTERM to the local launcher (pid {pid})")
    return 0


def _resume_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch resume", description="Continue a stopped run from its checkpoint, "
                                "in the same run directory (counters, metrics.csv and stop conditions continue).")
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--follow", action="store_true", help="a Slurm run: stream progress, exit with the run's result")
    p.add_argument("--after", metavar="JOBID", help="a Slurm run: queue the continuation to start once job JOBID "
                   "has ended, however it ended (--dependency=afterany); default with --chain: the run's job "
                   "while it is pending or running")
    p.add_argument("--chain", type=int, metavar="K", help="a Slurm run: queue K continuation jobs, each after the "
                   "one before (for clusters that forbid requeue); a run that has ended by itself is not continued")
    return p


def cmd_resume(argv) -> int:
    args = _resume_parser().parse_args(argv)
    run = args.run_dir
    if args.after is not None or args.chain is not None:
        if args.chain is not None and args.chain < 1:
            raise UsageError(f"--chain must be >= 1, got {args.chain}")
        command = "srl-launch resume " + " ".join(shlex.quote(a) for a in argv)
        after, job_ids = runs.continue_later(run.root, sys.executable, command, args.after, args.chain or 1)
        print(f"continuing {run.root}: queued job {', '.join(job_ids)}" + (f", after job {after}" if after else ""))
        return _follow(run, job_ids[-1]) if args.follow else 0
    if run.slurm.exists():
        job_id, info = slurm.run_job(run)
        if (slurm.live(info) or info.error) and slurm.group_jobs(run):
            raise UsageError(f"job {job_id} of {run.root} (slurm.layout: jobs) is {info.line()}; cancel the run "
                             f"first: srl-launch cancel {run.root}")
        if slurm.live(info) or info.error:
            raise UsageError(f"job {job_id} of {run.root} is {info.line()}; cancel it first, or queue the "
                             f"continuation after it: --after {job_id}")
    elif local.launcher_pid(run) is not None:
        raise UsageError(f"{run.root} is still running (local launcher pid {local.launcher_pid(run)})")
    exp, run = runs.reopen(run.root)
    command = "srl-launch resume " + " ".join(shlex.quote(a) for a in argv)
    if not run.slurm.exists():
        local.check_fits(exp)
        print(f"resuming {run.root}: attempt {run.attempt}")
        code = local.run(exp, run)
        print(f"run directory: {run.root}")
        return code
    job_id = slurm.submit(slurm.prepare(exp, run.root, sys.executable, command), run, command)
    print(f"resuming {run.root}: attempt {run.attempt}, submitted {_jobs_text(run, job_id)}")
    return _follow(run, job_id) if args.follow else 0


class UsageError(ValueError):
    pass


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct seeds, got {text!r}")
    return seeds


def _enjoy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch enjoy", description="Play whole episodes with a run's checkpoint "
                                "(on this machine), print each return, optionally write them as an MP4.")
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--video", type=Path, help="write the episodes to this MP4 file")
    p.add_argument("--greedy", action="store_true", help="the most likely action, instead of actions as the "
                   "least exploring actor chooses them (PPO: sampled from the policy; DQN: its tiny epsilon)")
    p.add_argument("--seed", type=int, default=0, help="env seeds: this, this + 1, ... (offset from every actor's)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tag", help="play the parameter database's version with this tag (best: evaluation's "
                       "highest scoring; latest; snapshot-N) instead of the checkpoint")
    which.add_argument("--version", type=int, help="play this stored version (srl-launch params RUN lists them)")
    p.add_argument("--against", choices=("random", "one-ply"), help="a turn-taking game (self-play): play "
                   "--games games against this fixed player, first mover in half of them, and count the wins")
    p.add_argument("--games", type=int, default=200, help="with --against: games to play (default 200)")
    return p


def cmd_enjoy(argv) -> int:
    args = _enjoy_parser().parse_args(argv)
    if args.episodes < 1 or args.games < 1:
        raise UsageError(f"--episodes and --games must be >= 1, got {args.episodes} and {args.games}")
    if args.against and args.video:
        raise UsageError("--video records episodes of one agent; --against plays games against a fixed player")
    from srl_hpc.enjoy import duel, enjoy  # torch and the envs, only for this command

    try:
        if args.against:
            duel(args.run_dir, args.against, args.games, greedy=args.greedy, seed=args.seed, version=args.version,
                 tag=args.tag)
            return 0
        enjoy(args.run_dir, args.episodes, greedy=args.greedy, video=args.video, seed=args.seed,
              version=args.version, tag=args.tag)
    except ValueError as e:  # what this run cannot be watched with: no greedy(), a multi-agent env
        raise UsageError(str(e)) from None
    return 0


def _params_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch params", description="A run's parameter database: the versions "
                                "of each policy stored in RUN/parameters/ and their tags; tag or untag a version.")
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--policy", default="", help="the policy (a run with `policies`); default: the run's one policy")
    p.add_argument("--tag", action="append", default=[], metavar="NAME=VERSION",
                   help="tag a stored version (a tagged version is never garbage-collected); repeatable")
    p.add_argument("--untag", action="append", default=[], metavar="NAME", help="remove a tag; repeatable")
    return p


def cmd_params(argv) -> int:
    from srl_hpc.services.parameter_db import ParameterDB

    args = _params_parser().parse_args(argv)
    root = args.run_dir.parameters_of(args.policy)
    if not root.is_dir():
        stored = sorted(p.name for p in (args.run_dir.root / "parameters").glob("*"))
        raise FileNotFoundError(f"{root}: no parameter database" +
                                (f" (policies stored: {', '.join(stored)})" if stored else ""))
    db = ParameterDB(root)
    for word in args.tag:
        name, sep, version = word.partition("=")
        if not sep or not version.strip().isdigit():
            raise UsageError(f"--tag {word!r}: expected NAME=VERSION, e.g. --tag keep=120")
        try:
            db.tag(name, int(version))
        except ValueError as e:
            raise UsageError(str(e)) from None
    for name in args.untag:
        db.untag(name)
    tags_of: dict[int, list[str]] = {}
    for name, record in db.tags().items():
        tags_of.setdefault(record["version"], []).append(name)
    versions = db.versions()
    rated = {player: elo for player, elo in db.ratings().get("elo", [])}  # self-play: the rating workers' Elo
    print(f"{root}: {len(versions)} versions stored" + ("; Elo (random player 0) from the rating workers" if rated
                                                         else ""))
    for v in versions:
        elo = f"{rated[v]:>7.0f}  " if v in rated else " " * 9 if rated else ""
        print(f"  {v:>9}  {elo}{' '.join(tags_of.get(v, []))}")
    fixed = [f"{player} {elo:.0f}" for player, elo in rated.items() if isinstance(player, str)]
    if fixed:
        print(f"  fixed players: {', '.join(fixed)}")
    return 0


# each command's parser, for --help and shell completion (_parser)
PARSERS = {"run": _run_parser, "prepare": _prepare_parser, "validate": _validate_parser, "graph": _graph_parser,
           "status": _status_parser, "logs": _logs_parser, "cancel": _cancel_parser, "resume": _resume_parser,
           "enjoy": _enjoy_parser, "params": _params_parser, "doctor": doctor.parser, "tune": _tune_parser}
COMMANDS = {"prepare": cmd_prepare, "validate": cmd_validate, "graph": cmd_graph, "status": cmd_status,
            "logs": cmd_logs, "cancel": cmd_cancel, "resume": cmd_resume, "enjoy": cmd_enjoy, "params": cmd_params,
            "doctor": doctor.cmd_doctor, "tune": cmd_tune}


# 0 ok, 1 the run failed (returned by the commands), 2 what was asked cannot be done as written, 3 the scheduler
# refused or did not answer, 128+N a signal (launcher.local); docs/local-mode.md lists them
EXIT_CODES = {UsageError: 2, config.ConfigError: 2, plan.PlanError: 2, local.TooBigForThisMachine: 2,
              FileNotFoundError: 2, FileExistsError: 2, PermissionError: 2, slurm.SlurmError: 3}


def _parser() -> argparse.ArgumentParser:
    """Every command's parser under one, for --help and shell completion. The commands parse their own arguments
    (main): `srl-launch EXPERIMENT.yaml` means `run`, which a parser's subcommands cannot say."""
    top = argparse.ArgumentParser(prog="srl-launch", usage=USAGE, epilog=EXITS,
                                  description="Run, check and follow srl-hpc experiments, locally or on Slurm.",
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="store_true", help="print the installed version")
    commands = top.add_subparsers(metavar="COMMAND", help=", ".join(PARSERS))
    commands.completer = _COMPLETERS["experiment"]  # the first word may be an experiment file: `run` it
    for name, build in PARSERS.items():
        own = build()
        for action in own._actions:
            action.completer = _COMPLETERS.get(action.dest)  # None: argcomplete's default, any file
        commands.add_parser(name, parents=[own], add_help=False, description=own.description)
    return top


# what a word completes to, by the argument it is for (the rest: any file)
_COMPLETERS = {"experiment": FilesCompleter(("yaml", "yml")), "experiments": FilesCompleter(("yaml", "yml")),
               "profile": FilesCompleter(("yaml", "yml")), "run_dir": DirectoriesCompleter()}


def main(argv=None) -> int:
    complete(_parser, PARSERS, default="run")  # the shell's completion hook: answers and exits
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a usage error: what to type, on stderr
        print(_parser().format_help(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(_parser().format_help())
        return 0
    if argv[0] == "--version":
        print(f"srl-launch {__version__}")
        return 0
    try:
        if argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        if argv[0] == "run":
            return cmd_run(argv[1:])
        _refuse_unknown_command(argv[0])
        return cmd_run(argv)
    except tuple(EXIT_CODES) as e:
        print(f"srl-launch: {e}", file=sys.stderr)
        return next(code for kind, code in EXIT_CODES.items() if isinstance(e, kind))


def _refuse_unknown_command(word: str) -> None:
    """A first word that is neither a command nor a file that exists, but close to a command (`valdate`), is a
    typo: say so, instead of reading it as an experiment file that is not there."""
    if Path(word).exists() or word.startswith("-") or word.endswith((".yaml", ".yml")):
        return
    close = difflib.get_close_matches(word, [*COMMANDS, "run"], n=1, cutoff=0.6)
    if close:
        raise UsageError(f"unknown command {word!r}; did you mean {close[0]!r}? (srl-launch --help lists them)")


if __name__ == "__main__":
    sys.exit(main())
