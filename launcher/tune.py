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
import io
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from launcher import local, trials
from launcher.tune_knobs import (
    BY_KEY,
    PLACEMENT,
    changes_of,
    limits,
    normalized,
    order,
    overrides,
    read,
    skip_reason,
    value_of,
)
from srl_hpc import config

STALE_AFTER = 6  # trials since the best's latest, after which it is measured again before the next trial


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
        return sum(cast(float, t.fps) for t in self.trials) / len(self.trials)  # kept: trials that ran

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


def search(
    base: dict,
    keys: tuple[str, ...],
    measure: Measure,
    limits: dict,
    budget: float,
    min_gain: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    say=None,
    invalid: Callable[[dict], str | None] = lambda setting: None,
) -> Outcome:
    """The greedy, verdict-led search from `base` (see the module's docstring).
    `invalid`: why a setting cannot run at all (not a valid experiment, too big for the machine), or None."""
    return Search(keys, measure, limits, budget, min_gain, clock, say or _say, invalid).from_base(base)


class Search:
    """The search's state (every trial, the settings kept, what not to try again) and its steps: measure the
    experiment as given twice, then knob by knob in the order the best's verdict gives, try each value once
    and check the fastest against the best measured again beside it, until a pass over the knobs keeps
    nothing or the budget is spent."""

    def __init__(
        self,
        keys: tuple[str, ...],
        measure: Measure,
        limits: dict,
        budget: float,
        min_gain: float,
        clock: Callable[[], float],
        say: Callable[[str], None],
        invalid: Callable[[dict], str | None],
    ) -> None:
        self.keys, self.measure, self.limits, self.budget, self.min_gain = keys, measure, limits, budget, min_gain
        self.clock, self.say, self.invalid = clock, say, invalid
        self.start = clock()
        self.done: list[Trial] = []  # every trial, in order
        self.seen: set[tuple] = set()  # every setting measured
        self.kept: list[Kept] = []  # the experiment as given, then each setting that became the best
        self.undone: set[tuple] = set()  # (knob, value) pairs a kept setting changed away from
        self.far: set[str] = set()  # knobs whose values all came well under the best when last tried

    def from_base(self, base: dict) -> Outcome:
        self.kept = [
            Kept(base, [self.run(base, "the experiment as given"), self.run(base, "the experiment as given, again")])
        ]
        failed = [t.error for t in self.kept[0].trials if t.fps is None]
        if failed:
            raise trials.TrialFailed(f"the experiment as given failed to run: {failed[0]}")
        improved = True
        while improved:
            improved = False
            for key in order(self.kept[-1].verdict, self.keys, self.far):
                kept = self.try_knob(key)
                if kept is None:  # the budget is spent
                    return Outcome(self.done, self.kept)
                if kept:
                    improved = True
                    break
        return Outcome(self.done, self.kept)

    def run(self, setting: dict, why: str) -> Trial:
        """One trial of `setting`, recorded and reported; a trial interrupted (signal) stops the search."""
        trial = Trial(len(self.done), dict(setting), why)
        self.seen.add(tuple(sorted(setting.items())))
        began = self.clock()
        try:
            figures = self.measure(setting, trial.index)
            trial.fps, trial.verdict = trials.training_fps(figures), figures.get("verdict")
            trial.evidence, trial.run_dir = figures.get("verdict_evidence", ""), figures.get("run_dir", "")
        except trials.TrialFailed as e:
            trial.error = str(e).strip().splitlines()[-1] if str(e).strip() else "failed"
            if e.code >= 128:  # interrupted: the search stops with what it has
                raise
        trial.seconds = self.clock() - began
        self.done.append(trial)
        self.say(_progress(trial))
        return trial

    def affordable(self, count: int) -> bool:
        """Whether `count` more trials of the mean length so far fit in the budget."""
        mean = sum(t.seconds for t in self.done) / len(self.done)
        return self.clock() - self.start + count * mean <= self.budget

    def again(self, why: str) -> Trial:
        """The best measured once more (the machine's speed drifts during a search): its figure becomes the
        mean of its two latest trials."""
        best = self.kept[-1]
        trial = self.run(best.setting, why)
        if trial.fps is not None:
            self.kept[-1] = dataclasses.replace(best, trials=[best.trials[-1], trial])
        return trial

    def candidates(self, key: str, best: Kept) -> list[tuple[dict, dict]]:
        """(the change, the setting) for each value of `key` (with its companions) not yet measured from the
        best, and neither skipped, undone, nor invalid."""
        found: list[tuple[dict, dict]] = []
        for change in changes_of(key, best.setting, self.keys):
            candidate = normalized({**best.setting, **change})
            if (
                any((k, v) in self.undone or skip_reason(best.setting, k, v, self.limits) for k, v in change.items())
                or tuple(sorted(candidate.items())) in self.seen
                or candidate in [c for _, c in found]
                or self.invalid(candidate)
            ):
                continue
            found.append((change, candidate))
        return found

    def try_knob(self, key: str) -> bool | None:
        """Each value of `key` once; the fastest, if near the best or above it, checked. True: it became the
        best; False: it did not (or there was nothing to try); None: the budget is spent."""
        best = self.kept[-1]
        candidates = self.candidates(key, best)
        if not candidates:
            return False
        stale = self.done[-1].index - best.trials[-1].index >= STALE_AFTER
        if not self.affordable(stale + len(candidates) + 2):  # (the best again,) each value, the fastest's check
            self.say(f"budget spent after {len(self.done)} trials")
            return None
        if stale:
            self.again(f"the best ({best.label}) again: {STALE_AFTER} trials since its last")
            best = self.kept[-1]
        firsts = [
            self.run(
                candidate,
                f"{best.verdict or 'unknown'}-bound ({best.label}): "
                + " with ".join(f"{k} {best.setting[k]} -> {v}" for k, v in change.items())
                + f", {BY_KEY[key].why}",
            )
            for change, candidate in candidates
        ]
        fastest = max((t for t in firsts if t.fps is not None), key=lambda t: cast(float, t.fps), default=None)
        # one short trial is noisy (a faster setting can measure below the best in its one trial): the knob's
        # fastest value, if near the best or above it, is checked, paired in time: the best again, then the
        # value again, against the best's new trial
        if fastest is None or cast(float, fastest.fps) < best.fps * (1 - self.min_gain):
            self.far.add(key)  # tried last from the next best: the least likely to pay there
            return False
        self.far.discard(key)
        fresh = self.again(f"check: the best ({best.label}) again, beside trial {fastest.index}")
        best = self.kept[-1]
        now = fresh.fps if fresh.fps is not None else best.fps
        check = self.run(fastest.setting, f"check: trial {fastest.index} again")
        won = Kept(fastest.setting, [fastest, check], decided=(fastest, fresh, check))
        if check.fps is not None and check.fps > now and won.fps > now * (1 + self.min_gain):
            self.kept.append(won)
            self.undone.update((k, v) for k, v in best.setting.items() if won.setting[k] != v)  # measured slower
            return True
        return False


def _say(line: str) -> None:
    print(line, flush=True)  # progress, as it happens, also into a file or a pipe


def _progress(t: Trial) -> str:
    result = f"{t.fps:>12,.0f} training frames/s, {t.verdict}-bound" if t.fps is not None else f"failed: {t.error}"
    return f"trial {t.index:>2} ({t.seconds:.0f} s): {result}  [{t.why}]"


# ------------------------------------------------------------------------------------------ the outputs


def trial_table(outcome: Outcome) -> str:
    """Every trial as a markdown table: the knob values that differ from the experiment as given, the result,
    the verdict, and why it was tried; every trial of a setting the search kept is marked."""
    lines = [
        "| trial | setting (vs the experiment as given) | training frames/s | verdict | why tried |",
        "|---|---|---|---|---|",
    ]
    for t in outcome.trials:
        diff = (
            ", ".join(
                f"{k.removeprefix('workers.')}={v}" for k, v in t.setting.items() if outcome.base.setting.get(k) != v
            )
            or "as given"
        )
        fps = f"{t.fps:,.0f}" if t.fps is not None else f"failed: {t.error}"
        mark = (
            " (best)"
            if t.setting == outcome.best.setting
            else " (kept)"
            if any(t.setting == k.setting for k in outcome.kept)
            else ""
        )
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
        best = (
            f"{against.fps:,.0f} between them ({against.verdict}-bound)"
            if against.fps is not None
            else f"{previous.fps:,.0f} (its trial between them failed)"
        )
        for key, value in kept.setting.items():
            if previous.setting.get(key) != value:
                out[key] = (
                    f"tune: was {outcome.base.setting[key]}; trials {first.index}, {check.index}: "
                    f"{first.fps:,.0f}, {check.fps:,.0f} training frames/s against the best's {best}"
                )
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


def tune(
    exp: config.Experiment,
    source: Path,
    tune_dir: Path,
    output: Path,
    *,
    keys: tuple[str, ...],
    seconds: float,
    warmup: float,
    budget: float,
    min_gain: float = 0.05,
    slurm: bool = False,
    given: Sequence[str] = (),
    say=None,
) -> Outcome:
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
    outcome = search(read(exp, keys), keys, measure, limits(exp, slurm), budget, min_gain, say=say, invalid=invalid)

    table = trial_table(outcome)
    changes = dict(outcome.changes)
    if PLACEMENT in changes:  # a placement's policy workers come with it
        tuned = config.with_overrides(exp, overrides(outcome.best.setting, exp))
        changes["workers.policy.count"] = value_of(tuned, "workers.policy.count")
    (tune_dir / "trials.md").write_text(table + "\n")
    (tune_dir / "trials.json").write_text(
        json.dumps(
            {
                "experiment": str(source),
                "where": where,
                "seconds": seconds,
                "warmup": warmup,
                "budget": budget,
                "keys": list(keys),
                "set": list(given),
                "base_fps": outcome.base.fps,
                "tuned_fps": outcome.best.fps,
                "changes": changes,
                "trials": [dataclasses.asdict(t) for t in outcome.trials],
            },
            indent=1,
        )
    )
    ratio = outcome.best.fps / outcome.base.fps
    header = [
        f"Tuned by srl-launch tune {time.strftime('%Y-%m-%d')} {where}: {outcome.base.fps:,.0f} -> "
        f"{outcome.best.fps:,.0f} training frames/s ({ratio:.2f}x; each the mean of 2 trials of {seconds:g} s)"
        + (f", with --set {' '.join(given)}" if given else ""),
        f"Every trial: {tune_dir / 'trials.md'}",
    ]
    notes = comments(outcome)
    if PLACEMENT in notes and "workers.policy.count" not in notes:
        notes["workers.policy.count"] = f"tune: with workers.placement {changes[PLACEMENT]}"
    output.write_text(tuned_yaml(source.read_text(), changes, notes, header))
    config.load(output)  # what was written loads
    say(f"\n{table}\n")
    say(
        f"tuned: {outcome.base.fps:,.0f} -> {outcome.best.fps:,.0f} training frames/s ({ratio:.2f}x); "
        + (f"changed {', '.join(f'{k}={v}' for k, v in changes.items())}" if changes else "nothing changed")
    )
    say(f"tuned experiment: {output}\ntrials: {tune_dir / 'trials.md'}")
    return outcome
