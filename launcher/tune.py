"""`srl-launch tune`: the settings that change throughput but not the algorithm (its losses and hyper-parameters;
the precision knobs do round the forward passes), chosen by short measured runs.

Each trial runs the experiment for a few seconds with tracing on (here, or as one Slurm job) and is judged by its
steady training frames/s (launcher.trials). The search is greedy and led by the traces: from the best setting so
far, the knobs that address its verdict (the stage that bounds it: env, inference, transport or trainer) are tried
first, one knob at a time, each of its values once (and with its JOINT companions); a setting that beats the best
by `min_gain` becomes the best, and its own verdict orders the next knobs, except that a knob whose values all came
well under the best when last tried goes last (the budget goes to the knobs not yet ruled out). One short trial is
noisy (a faster setting can measure below the best in its one trial), and the machine's speed drifts during a
search, so the experiment as given is measured twice, and a knob's fastest value, when its trial comes within
`min_gain` of the best's figure or beats it, is checked, paired in time: the best again, then the value again. It
becomes the best when its second trial beats that trial of the best and the mean of its two beats it by `min_gain`
(a gain about the size of the noise is found more often than by asking each trial for the full gain; one lucky
trial, or a machine faster than when the best was measured, changes nothing). The best is also measured again after
STALE_AFTER trials without one; its figure is the mean of its two latest trials. A kept change is not undone later.
The search ends when no knob's value beats the best, or when the budget is spent. Every trial, its verdict and why
it was tried go in a table.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

from launcher import local, trials
from srl_hpc import config

PLACEMENT = "workers.placement"


@dataclasses.dataclass(frozen=True)
class Knob:
    key: str
    values: tuple
    why: str  # what it changes, for the trial table


KNOBS = (
    Knob(PLACEMENT, ("srl", "impala", "seed"), "where inference runs"),
    Knob("workers.actor.count", (1, 2, 4), "actor processes (their share of the cores)"),
    Knob("workers.policy.count", (1, 2), "policy workers: actors per policy worker"),
    Knob("workers.actor.ring_size", (4, 8, 16, 32), "envs per actor: the batch each actor sends"),
    Knob("workers.actor.inference_splits", (1, 2, 4), "requests per ring: env stepping overlapping inference"),
    Knob("workers.policy.max_batch", (32, 64, 256), "the dynamic batch's cap"),
    Knob("workers.trainer.torch_threads", (1, 2, 4), "the trainer's compute threads"),
    Knob("workers.policy.torch_threads", (1, 2), "inference threads"),
    Knob("workers.policy.precision", ("fp32", "bf16"), "inference in bf16"),
    Knob("workers.trainer.precision", ("fp32", "bf16"), "the trainer's forward passes under bf16 autocast"),
)
BY_KEY = {k.key: k for k in KNOBS}
# values whose gains come together, so each is also tried with its companion (docs/tuning.md): bf16 in the trainer
# alone or in inference alone gains little, bf16 in both much more; and
# impala's actors infer their own ring's requests (no policy worker batches several actors'), so its batch is the
# ring's: impala is also tried with the largest ring
JOINT = {("workers.trainer.precision", "bf16"): {"workers.policy.precision": "bf16"},
         ("workers.policy.precision", "bf16"): {"workers.trainer.precision": "bf16"},
         (PLACEMENT, "impala"): {"workers.actor.ring_size": max(BY_KEY["workers.actor.ring_size"].values)}}
STALE_AFTER = 6  # trials since the best's latest, after which it is measured again before the next trial
# the allocation is the user's on a cluster: tune leaves the counts of processes alone there unless --keys names them
SLURM_KEYS = tuple(k.key for k in KNOBS if k.key not in ("workers.actor.count", "workers.policy.count"))

# the knobs that address each verdict, tried first (then the rest, in KNOBS' order)
FIRST = {
    # the trainer's own precision (alone, then with bf16 inference: JOINT; on a GPU the largest lever), then what
    # gives the trainer cores where every worker shares them, as in the trials here: a process fewer (the
    # placement), fewer or more actors
    "trainer": ("workers.trainer.precision", PLACEMENT, "workers.actor.count", "workers.policy.precision",
                "workers.trainer.torch_threads", "workers.actor.ring_size"),
    "inference": (PLACEMENT, "workers.policy.count", "workers.policy.max_batch", "workers.policy.precision",
                  "workers.policy.torch_threads", "workers.actor.inference_splits", "workers.actor.ring_size"),
    "transport": (PLACEMENT, "workers.actor.inference_splits", "workers.actor.ring_size", "workers.policy.max_batch"),
    "env": ("workers.actor.count", "workers.actor.ring_size", "workers.actor.inference_splits", PLACEMENT),
}


def order(verdict: str | None, keys: tuple[str, ...], far: set[str] = frozenset()) -> list[str]:
    """The knobs to try from a setting whose trial had this verdict: those addressing it first; those in `far`
    (every value measured well under the best when last tried, from a neighbouring setting) last."""
    first = [k for k in FIRST.get(verdict or "", ()) if k in keys]
    return sorted(first + [k for k in keys if k not in first], key=lambda k: k in far)


def value_of(exp: config.Experiment, key: str):
    return functools.reduce(getattr, key.split("."), exp)


def read(exp: config.Experiment, keys: tuple[str, ...]) -> dict:
    """The current value of every knob in `keys`."""
    return {key: value_of(exp, key) for key in keys}


def normalized(setting: dict) -> dict:
    """A setting whose policy worker count fits its placement (policy workers with 'srl' only)."""
    count = setting.get("workers.policy.count")
    if PLACEMENT not in setting or count is None:
        return setting
    return {**setting, "workers.policy.count": max(1, count) if setting[PLACEMENT] == "srl" else 0}


def overrides(setting: dict, exp: config.Experiment) -> list[str]:
    """The --set words of a setting, with what its placement requires of `exp`'s policy workers."""
    words = [f"{key}={value}" for key, value in setting.items()]
    placement = setting.get(PLACEMENT, exp.workers.placement)
    count = setting.get("workers.policy.count", exp.workers.policy.count)
    if placement != "srl" and count != 0:
        words.append("workers.policy.count=0")
    elif placement == "srl" and count == 0:
        words.append("workers.policy.count=1")
    return words


def changes_of(key: str, setting: dict, keys: tuple[str, ...]) -> list[dict]:
    """What trying `key` from `setting` changes, value by value: the value alone, then with its JOINT companions
    (those searched and not already so)."""
    out = []
    for value in BY_KEY[key].values:
        if value == setting[key]:
            continue
        out.append({key: value})
        also = {k: v for k, v in JOINT.get((key, value), {}).items() if k in keys and setting.get(k) != v}
        if also:
            out.append({key: value, **also})
    return out


def skip_reason(setting: dict, key: str, value, limits: dict) -> str | None:
    """Why this value of the knob is not worth a trial from `setting` (None: it is)."""
    placement = setting.get(PLACEMENT, "srl")
    if key == "workers.policy.count" and placement != "srl":
        return "policy workers exist only with placement srl"
    if key == "workers.policy.max_batch" and placement == "impala":
        return "an actor's inline inference batches its own ring"
    if key.endswith("torch_threads") and value > limits.get(key, 1):
        return f"more threads than the {limits.get(key, 1)} CPUs there"
    if key.endswith(".precision") and value == "bf16" and not limits.get(key):
        return f"no fast bf16 where the {key.split('.')[1]} runs (a GPU, or a CPU with avx512_bf16/AMX)"
    return None


@dataclasses.dataclass
class Trial:
    index: int
    setting: dict
    why: str
    fps: float | None = None
    verdict: str | None = None
    evidence: str = ""
    error: str = ""
    seconds: float = 0.0  # wall time the trial took, start-up included
    run_dir: str = ""


@dataclasses.dataclass
class Kept:
    """A setting the search kept, with its two latest trials (the experiment as given is measured twice; any
    other setting becomes the best when its second trial beats the best's trial measured between its two, and
    their mean beats that by min_gain; the best is measured again now and then). `decided`: what it was kept by,
    its first trial, the best's trial after it and its check (empty for the experiment as given)."""
    setting: dict
    trials: list[Trial]
    decided: tuple[Trial, ...] = ()

    @property
    def fps(self) -> float:
        return sum(t.fps for t in self.trials) / len(self.trials)

    @property
    def verdict(self) -> str | None:
        return self.trials[-1].verdict

    @property
    def label(self) -> str:
        return "trials " + ", ".join(str(t.index) for t in self.trials)


@dataclasses.dataclass
class Outcome:
    trials: list[Trial]  # every trial, in order
    kept: list[Kept]  # the experiment as given, then each setting that became the best

    @property
    def base(self) -> Kept:
        return self.kept[0]

    @property
    def best(self) -> Kept:
        return self.kept[-1]

    @property
    def changes(self) -> dict:
        return {k: v for k, v in self.best.setting.items() if self.base.setting.get(k) != v}


Measure = Callable[[dict, int], dict]  # (setting, trial index) -> launcher.trials figures; raises TrialFailed


def search(base: dict, keys: tuple[str, ...], measure: Measure, limits: dict, budget: float,
           min_gain: float = 0.05, clock: Callable[[], float] = time.monotonic, say=None,
           invalid: Callable[[dict], str | None] = lambda setting: None) -> Outcome:
    """The greedy, verdict-led search from `base` (see the module's docstring).
    `invalid`: why a setting cannot run at all (not a valid experiment, too big for the machine), or None."""
    say = say or _say
    start, done = clock(), []
    seen: set[tuple] = set()

    def run(setting: dict, why: str) -> Trial:
        trial = Trial(len(done), dict(setting), why)
        seen.add(tuple(sorted(setting.items())))
        began = clock()
        try:
            figures = measure(setting, trial.index)
            trial.fps, trial.verdict = trials.training_fps(figures), figures.get("verdict")
            trial.evidence, trial.run_dir = figures.get("verdict_evidence", ""), figures.get("run_dir", "")
        except trials.TrialFailed as e:
            trial.error = str(e).strip().splitlines()[-1] if str(e).strip() else "failed"
            if e.code >= 128:  # interrupted: the search stops with what it has
                raise
        trial.seconds = clock() - began
        done.append(trial)
        say(_progress(trial))
        return trial

    def affordable(trials: int) -> bool:
        mean = sum(t.seconds for t in done) / len(done)
        return clock() - start + trials * mean <= budget

    def again(why: str) -> Trial:
        """The best measured once more (the machine's speed drifts during a search): its figure becomes the
        mean of its two latest trials."""
        best = kept[-1]
        trial = run(best.setting, why)
        if trial.fps is not None:
            kept[-1] = dataclasses.replace(best, trials=[best.trials[-1], trial])
        return trial

    kept = [Kept(base, [run(base, "the experiment as given"), run(base, "the experiment as given, again")])]
    undone: set[tuple] = set()  # (knob, value) pairs a kept setting changed away from
    far: set[str] = set()  # knobs whose values all came well under the best when last tried
    failed = [t.error for t in kept[0].trials if t.fps is None]
    if failed:
        raise trials.TrialFailed(f"the experiment as given failed to run: {failed[0]}")
    improved = True
    while improved:
        improved, best = False, kept[-1]
        for key in order(best.verdict, keys, far):
            candidates = []  # (the change, the setting)
            for change in changes_of(key, best.setting, keys):
                candidate = normalized({**best.setting, **change})
                if (any((k, v) in undone or skip_reason(best.setting, k, v, limits) for k, v in change.items())
                        or tuple(sorted(candidate.items())) in seen or candidate in [c for _, c in candidates]
                        or invalid(candidate)):
                    continue
                candidates.append((change, candidate))
            if not candidates:
                continue
            stale = done[-1].index - best.trials[-1].index >= STALE_AFTER
            if not affordable(stale + len(candidates) + 2):  # (the best again,) each value, the fastest's check
                say(f"budget spent after {len(done)} trials")
                return Outcome(done, kept)
            if stale:
                again(f"the best ({best.label}) again: {STALE_AFTER} trials since its last")
                best = kept[-1]
            firsts = [run(candidate, f"{best.verdict or 'unknown'}-bound ({best.label}): "
                                     + " with ".join(f"{k} {best.setting[k]} -> {v}" for k, v in change.items())
                                     + f", {BY_KEY[key].why}")
                      for change, candidate in candidates]
            fastest = max((t for t in firsts if t.fps is not None), key=lambda t: t.fps, default=None)
            # one short trial is noisy (a faster setting can measure below the best in its one trial): the
            # knob's fastest value, if near the best or above it, is checked, paired in time: the best again,
            # then the value again, against the best's new trial
            if fastest is None or fastest.fps < best.fps * (1 - min_gain):
                far.add(key)  # tried last from the next best: the least likely to pay there
                continue
            far.discard(key)
            fresh = again(f"check: the best ({best.label}) again, beside trial {fastest.index}")
            best = kept[-1]
            now = fresh.fps if fresh.fps is not None else best.fps
            check = run(fastest.setting, f"check: trial {fastest.index} again")
            won = Kept(fastest.setting, [fastest, check], decided=(fastest, fresh, check))
            if check.fps is not None and check.fps > now and won.fps > now * (1 + min_gain):
                kept.append(won)
                undone.update((k, v) for k, v in best.setting.items() if won.setting[k] != v)  # measured slower
                improved = True
                break
    return Outcome(done, kept)


def _say(line: str) -> None:
    print(line, flush=True)  # progress, as it happens, also into a file or a pipe


def _progress(t: Trial) -> str:
    result = (f"{t.fps:>12,.0f} training frames/s, {t.verdict}-bound" if t.fps is not None
              else f"failed: {t.error}")
    return f"trial {t.index:>2} ({t.seconds:.0f} s): {result}  [{t.why}]"


# ------------------------------------------------------------------------------------------ the outputs

def trial_table(outcome: Outcome) -> str:
    """Every trial as a markdown table: the knob values that differ from the experiment as given, the result,
    the verdict, and why it was tried; every trial of a setting the search kept is marked."""
    lines = ["| trial | setting (vs the experiment as given) | training frames/s | verdict | why tried |",
             "|---|---|---|---|---|"]
    for t in outcome.trials:
        diff = ", ".join(f"{k.removeprefix('workers.')}={v}"
                         for k, v in t.setting.items() if outcome.base.setting.get(k) != v) or "as given"
        fps = f"{t.fps:,.0f}" if t.fps is not None else f"failed: {t.error}"
        mark = (" (best)" if t.setting == outcome.best.setting
                else " (kept)" if any(t.setting == k.setting for k in outcome.kept) else "")
        lines.append(f"| {t.index}{mark} | {diff} | {fps} | {t.verdict or '-'} | {t.why} |")
    return "\n".join(lines)


def comments(outcome: Outcome) -> dict[str, str]:
    """Per changed key, what it was kept by: the setting's two trials and the best's trial between them (later
    trials of either, when the best was measured again, are in the table)."""
    out = {}
    for previous, kept in zip(outcome.kept, outcome.kept[1:]):
        first, against, check = kept.decided
        # (when the best's trial between them failed, the setting was judged against the best's figure, which
        # has not changed since: only the best is measured again)
        best = (f"{against.fps:,.0f} between them ({against.verdict}-bound)" if against.fps is not None
                else f"{previous.fps:,.0f} (its trial between them failed)")
        for key, value in kept.setting.items():
            if previous.setting.get(key) != value:
                out[key] = (f"tune: was {outcome.base.setting[key]}; trials {first.index}, {check.index}: "
                            f"{first.fps:,.0f}, {check.fps:,.0f} training frames/s against the best's {best}")
    return {k: v for k, v in out.items() if k in outcome.changes}


def tuned_yaml(source: str, changes: dict, notes: dict[str, str], header: list[str]) -> str:
    """The experiment file's text with `changes` made (dotted keys, new maps made where missing), a comment at
    the end of each changed line, and `header` lines on top; the file's other keys and comments kept as they are."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()
    yaml.preserve_quotes = True  # "00:15:00" must stay a string (YAML 1.1 reads it as a number)
    yaml.width = 4096
    data = yaml.load(source)
    for key, value in changes.items():
        *path, last = key.split(".")
        node = data
        for part in path:
            if part not in node or node[part] is None:
                node[part] = CommentedMap()
            node = node[part]
        node[last] = value
        node.ca.items.pop(last, None)  # the line's old comment described the old value
        if key in notes:
            node.yaml_add_eol_comment(notes[key], last)
    out = io.StringIO()
    yaml.dump(data, out)
    return "".join(f"# {line}\n" for line in header) + out.getvalue()


def limits(exp: config.Experiment, slurm: bool) -> dict:
    """What bounds the knobs where the trials run, by knob: the CPUs there for threads, whether bf16 is fast
    there for precision (a GPU; a CPU with avx512_bf16/AMX, known here only: a cluster's nodes may differ)."""
    workers = exp.workers
    if slurm:
        where_inference = exp.slurm.actor if workers.placement == "impala" else exp.slurm.policy
        cpus = {"workers.trainer.torch_threads": exp.slurm.trainer.cpus_per_task,
                "workers.policy.torch_threads": where_inference.cpus_per_task}
        cpu_bf16 = False
    else:
        n = os.cpu_count() or 1
        cpus = {"workers.trainer.torch_threads": n, "workers.policy.torch_threads": n}
        cpu_bf16 = _cpu_has_bf16()
    return {**cpus,
            "workers.policy.precision": workers.policy.device.startswith("cuda") or cpu_bf16,
            "workers.trainer.precision": workers.trainer.device.startswith("cuda") or cpu_bf16}


def _cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    try:
        flags = Path(cpuinfo).read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def tune(exp: config.Experiment, source: Path, tune_dir: Path, output: Path, *, keys: tuple[str, ...],
         seconds: float, warmup: float, budget: float, min_gain: float = 0.05, slurm: bool = False,
         given: list[str] = (), say=None) -> Outcome:
    """Search, then write TUNE_DIR/trials.json, trials.md and the tuned experiment file `output` (beside the
    experiment by default, so that the paths its `defaults:` names still resolve)."""
    say = say or _say
    tune_dir.mkdir(parents=True, exist_ok=True)
    traced = config.with_overrides(exp, ["monitor.trace=true"])  # the verdicts come from the traces

    def measure(setting: dict, index: int) -> dict:
        trial_exp = config.with_overrides(traced, overrides(setting, exp))
        return trials.measure(trial_exp, seconds, warmup, tune_dir / f"trial-{index:02d}", slurm=slurm)

    def invalid(setting: dict) -> str | None:
        try:
            trial_exp = config.with_overrides(traced, overrides(setting, exp))
            if not slurm:
                local.check_fits(trial_exp)
        except (config.ConfigError, local.TooBigForThisMachine) as e:
            return str(e)
        return None

    where = "as Slurm jobs" if slurm else f"on {socket.gethostname()} ({os.cpu_count()} CPUs)"
    say(f"tuning {source} {where}: trials of {seconds:g} s, budget {budget:g} s, knobs: {', '.join(keys)}")
    outcome = search(read(exp, keys), keys, measure, limits(exp, slurm), budget, min_gain, say=say,
                     invalid=invalid)

    table = trial_table(outcome)
    changes = dict(outcome.changes)
    if PLACEMENT in changes:  # a placement's policy workers come with it
        tuned = config.with_overrides(exp, overrides(outcome.best.setting, exp))
        changes["workers.policy.count"] = value_of(tuned, "workers.policy.count")
    (tune_dir / "trials.md").write_text(table + "\n")
    (tune_dir / "trials.json").write_text(json.dumps(
        {"experiment": str(source), "where": where, "seconds": seconds, "warmup": warmup, "budget": budget,
         "keys": list(keys), "set": list(given), "base_fps": outcome.base.fps, "tuned_fps": outcome.best.fps,
         "changes": changes, "trials": [dataclasses.asdict(t) for t in outcome.trials]}, indent=1))
    ratio = outcome.best.fps / outcome.base.fps
    header = [f"Tuned by srl-launch tune {time.strftime('%Y-%m-%d')} {where}: {outcome.base.fps:,.0f} -> "
              f"{outcome.best.fps:,.0f} training frames/s ({ratio:.2f}x; each the mean of 2 trials of {seconds:g} s)"
              + (f", with --set {' '.join(given)}" if given else ""),
              f"Every trial: {tune_dir / 'trials.md'}"]
    notes = comments(outcome)
    if PLACEMENT in notes and "workers.policy.count" not in notes:
        notes["workers.policy.count"] = f"tune: with workers.placement {changes[PLACEMENT]}"
    output.write_text(tuned_yaml(source.read_text(), changes, notes, header))
    config.load(output)  # what was written loads
    say(f"\n{table}\n")
    say(f"tuned: {outcome.base.fps:,.0f} -> {outcome.best.fps:,.0f} training frames/s ({ratio:.2f}x); "
        + (f"changed {', '.join(f'{k}={v}' for k, v in changes.items())}" if changes else "nothing changed"))
    say(f"tuned experiment: {output}\ntrials: {tune_dir / 'trials.md'}")
    return outcome
