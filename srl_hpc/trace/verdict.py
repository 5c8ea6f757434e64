"""The trace's bottleneck verdict: which stage (env, inference, transport, trainer) bounds a run's throughput,
named from the mean time shares of each worker kind (srl_hpc.trace.analysis.summarize passes them in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

SATURATED = 0.9  # a stage busy this much of its time cannot go faster
BUSY = 0.5  # a consumer busy at least this much is the likely cause of its producers' waits


@dataclass
class Verdict:
    stage: str  # env, inference, transport, trainer, or unknown
    evidence: str


def verdict(actor: dict | None, policy: dict | None, trainer: dict | None, extra: dict | None = None) -> Verdict:
    """Name the stage that bounds throughput, from the mean time shares of each worker kind.

    The actors are the source of every frame, so where their time goes says where the limit is:
      0. The trainer busy (computing + publishing) >= 90% of its time is saturated: trainer-bound,
         whatever the actors do (it could not consume more frames).
      1. Otherwise take the actors' largest share among stepping envs, waiting on inference replies,
         running inference inline (a policy handler in the actor's own worker) and being blocked sending:
         - stepping envs                  -> env-bound;
         - inference inline               -> inference-bound;
         - blocked sending samples        -> trainer-bound if the trainer is busy >= 50% (it does not keep up),
                                             else transport-bound (the trainer waits too: the sample stream is
                                             the limit);
         - waiting on inference replies   -> inference-bound if the policy worker is busy >= 50%, else
                                             transport-bound (the policy worker idles: replies are slow on the
                                             way, not in compute).
    `extra` may carry the inference latency at the actor vs the policy worker's own time, the fraction
    of segments the trainer dropped, and the sample and train frame rates: further evidence in the words,
    never a change of verdict.
    """
    extra = extra or {}
    if not actor:
        return Verdict("unknown", "no actor env_step rows: nothing to say where frames come from")
    trainer_busy = trainer["computing"] + trainer["publishing"] if trainer else None
    policy_busy = policy["computing"] + policy["replying"] if policy else None
    inline = actor.get("inference_inline", 0.0)
    actors = (
        f"actors spend {_pct(actor['stepping'])} of their time stepping envs, "
        f"{_pct(actor['waiting_inference'])} waiting on inference, "
        + (f"{_pct(inline)} running inference inline, " if inline else "")
        + f"{_pct(actor['sending'])} blocked sending samples"
    )
    trainer_words = (
        ""
        if trainer_busy is None
        else f"the trainer is busy {_pct(trainer_busy)} and waits for data {_pct(cast(dict, trainer)['waiting'])}"
    )
    policy_words = "" if policy_busy is None else f"the policy worker is busy {_pct(policy_busy)}"
    dropped = extra.get("dropped_fraction") or 0.0
    backlog_words = f"; the trainer drops {_pct(dropped)} of segments as too stale" if dropped > 0.01 else ""
    if extra.get("sample_fps") and extra.get("train_fps") and extra["sample_fps"] > 1.2 * extra["train_fps"]:
        backlog_words += (
            f"; actors produce {extra['sample_fps']:,.0f} frames/s but the trainer consumes only "
            f"{extra['train_fps']:,.0f}/s"
        )

    if trainer_busy is not None and trainer_busy >= SATURATED:
        return Verdict("trainer", f"{trainer_words}: it cannot consume faster; {actors}{backlog_words}")
    top = max(("stepping", "waiting_inference", "inference_inline", "sending"), key=lambda k: actor.get(k, 0.0))
    if top == "inference_inline":
        return Verdict("inference", f"{actors}: the actors' own forward passes bound them; {trainer_words}")
    if top == "stepping":
        return Verdict("env", f"{actors}; {trainer_words or 'no trainer trace'}; {policy_words or 'no policy trace'}")
    if top == "sending":
        if trainer_busy is not None and trainer_busy >= BUSY:
            return Verdict("trainer", f"{actors}: back-pressure from the trainer; {trainer_words}{backlog_words}")
        return Verdict(
            "transport",
            f"{actors}, yet {trainer_words or 'there is no trainer trace'}: "
            "the sample stream does not carry segments fast enough",
        )
    wire = ""
    if extra.get("inference_latency") and extra.get("policy_service"):
        wire = (
            f"; a reply takes {extra['inference_latency'] * 1e3:.2f} ms (p50) at the actor, of which the "
            f"policy worker accounts for {extra['policy_service'] * 1e3:.2f} ms"
        )
    if policy_busy is not None and policy_busy >= BUSY:
        return Verdict("inference", f"{actors}; {policy_words}{wire}")
    return Verdict(
        "transport",
        f"{actors}, yet {policy_words or 'there is no policy trace'}{wire}: "
        "the time goes on the inference stream, not in compute",
    )


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"
