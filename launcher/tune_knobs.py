"""The knobs `srl-launch tune` searches (launcher.tune): each one's values, why it matters, the knobs that
address each verdict first, the values tried together, and what bounds them where the trials run."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Set
from pathlib import Path
from typing import Any

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
JOINT = {
    ("workers.trainer.precision", "bf16"): {"workers.policy.precision": "bf16"},
    ("workers.policy.precision", "bf16"): {"workers.trainer.precision": "bf16"},
    (PLACEMENT, "impala"): {"workers.actor.ring_size": max(BY_KEY["workers.actor.ring_size"].values)},
}


# the allocation is the user's on a cluster: tune leaves the counts of processes alone there unless --keys names them
SLURM_KEYS = tuple(k.key for k in KNOBS if k.key not in ("workers.actor.count", "workers.policy.count"))


# the knobs that address each verdict, tried first (then the rest, in KNOBS' order)
FIRST = {
    # the trainer's own precision (alone, then with bf16 inference: JOINT; on a GPU the largest lever), then what
    # gives the trainer cores where every worker shares them, as in the trials here: a process fewer (the
    # placement), fewer or more actors
    "trainer": (
        "workers.trainer.precision",
        PLACEMENT,
        "workers.actor.count",
        "workers.policy.precision",
        "workers.trainer.torch_threads",
        "workers.actor.ring_size",
    ),
    "inference": (
        PLACEMENT,
        "workers.policy.count",
        "workers.policy.max_batch",
        "workers.policy.precision",
        "workers.policy.torch_threads",
        "workers.actor.inference_splits",
        "workers.actor.ring_size",
    ),
    "transport": (PLACEMENT, "workers.actor.inference_splits", "workers.actor.ring_size", "workers.policy.max_batch"),
    "env": ("workers.actor.count", "workers.actor.ring_size", "workers.actor.inference_splits", PLACEMENT),
}


def order(verdict: str | None, keys: tuple[str, ...], far: Set[str] = frozenset()) -> list[str]:
    """The knobs to try from a setting whose trial had this verdict: those addressing it first; those in `far`
    (every value measured well under the best when last tried, from a neighbouring setting) last."""
    first = [k for k in FIRST.get(verdict or "", ()) if k in keys]
    return sorted(first + [k for k in keys if k not in first], key=lambda k: k in far)


def value_of(exp: config.Experiment, key: str) -> Any:
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


def limits(exp: config.Experiment, slurm: bool) -> dict:
    """What bounds the knobs where the trials run, by knob: the CPUs there for threads, whether bf16 is fast
    there for precision (a GPU; a CPU with avx512_bf16/AMX, known here only: a cluster's nodes may differ)."""
    workers = exp.workers
    if slurm:
        where_inference = exp.slurm.actor if workers.placement == "impala" else exp.slurm.policy
        cpus = {
            "workers.trainer.torch_threads": exp.slurm.trainer.cpus_per_task,
            "workers.policy.torch_threads": where_inference.cpus_per_task,
        }
        cpu_bf16 = False
    else:
        n = os.cpu_count() or 1
        cpus = {"workers.trainer.torch_threads": n, "workers.policy.torch_threads": n}
        cpu_bf16 = _cpu_has_bf16()
    return {
        **cpus,
        "workers.policy.precision": workers.policy.device.startswith("cuda") or cpu_bf16,
        "workers.trainer.precision": workers.trainer.device.startswith("cuda") or cpu_bf16,
    }


def _cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    try:
        flags = Path(cpuinfo).read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags
