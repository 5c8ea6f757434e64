"""Frame accounting from the traces alone, a second record beside the counters the workers report to the
controller (summary.json): each actor's `segment` rows (frames it sent), each trainer's `segment` rows (frames
it received, from which actor, dropped as stale or kept), `train_step` rows (frames trained) and
`dropped_at_stop` rows (held when training stopped). Other code writes them than the counters, so where both
are complete they must agree frame for frame.

A trace is complete when its worker closed it (reader.WorkerTrace.complete): a killed worker's trace ends at
its last flush, so its figures are lower bounds and only identities among complete traces are checked. A
killed actor's frames are still all counted where they arrived, when the trainers' traces are complete.
Off-policy runs (buffer workers between actors and trainers) train on replay, not on segments: there only
what the actors sent and the buffers received is summed.

Where the run's summary.json is there (RunTrace.meta), the traces are also held against its counters: on-policy,
of one attempt, what complete traces record must be what the workers counted.
"""

from __future__ import annotations

import numpy as np

from srl_hpc.trace.reader import RunTrace, WorkerTrace


def frame_accounting(run: RunTrace) -> dict | None:
    """Frames sent, received, trained and dropped as the traces record them, per actor too, with the identities
    that fail among complete traces (`mismatches`); None when no trace records a segment."""
    actors, buffers = run.hosting("actor"), run.hosting("buffer")
    trainers = [] if buffers else run.hosting("trainer")  # on-policy: the trainers receive the segments
    if not actors or not any("segment" in w.tables for w in actors):
        return None
    sent = {w.name: _frames(w, "segment") for w in actors}
    by_actor: dict[str, int] = dict.fromkeys(sent, 0)
    consumed = dropped = 0
    for w in trainers:
        segments = w.table("segment")
        if "actor" in segments:
            per_index = np.bincount(segments["actor"].astype(int), weights=segments["frames"])
            for index in np.flatnonzero(per_index):
                by_actor[f"actor/{index}"] = by_actor.get(f"actor/{index}", 0) + int(per_index[index])
        if "dropped" in segments:
            dropped += int(segments["frames"][segments["dropped"].astype(bool)].sum())
        dropped += _frames(w, "dropped_at_stop")
        consumed += _frames(w, "train_step")
    receivers = trainers or buffers
    received = sum(by_actor.values()) if trainers else sum(_frames(w, "segment") for w in buffers)
    incomplete = sorted(w.name for w in (*actors, *receivers) if not w.complete)
    receivers_complete = all(w.complete for w in receivers)
    actors_complete = all(w.complete for w in actors)
    mismatches = []
    if receivers_complete and trainers:
        if received != consumed + dropped:
            mismatches.append(f"received {received:,} != trained {consumed:,} + dropped {dropped:,}")
        mismatches += [
            f"{name} sent {sent[name]:,}, the trainers received {by_actor[name]:,} from it"
            for name in sent
            if sent[name] != by_actor[name] and name not in incomplete
        ]
    if receivers_complete and actors_complete and sum(sent.values()) != received:
        mismatches.append(f"sent {sum(sent.values()):,} != received {received:,}")
    traced = {"frames_sent": sum(sent.values()), "frames_received": received}
    traced |= {"frames_consumed": consumed, "frames_dropped": dropped}
    comparable = ["frames_sent"] if actors_complete else []
    comparable += ["frames_received", "frames_consumed", "frames_dropped"] if receivers_complete else []
    summary: dict = run.meta.get("summary") or {}
    if not trainers or not summary or max((w.attempts for w in run.workers), default=1) > 1:
        comparable = []  # off-policy trainers count replay batches; resumed runs are not checked
    mismatches += [
        f"{key}: the traces record {traced[key]:,}, the workers counted {summary.get(key)} (summary.json)"
        for key in comparable
        if traced[key] != summary.get(key)
    ]
    return {
        "sent": sum(sent.values()),
        "received": received,
        "consumed": consumed if trainers else None,
        "dropped": dropped if trainers else None,
        "by_actor": {
            name: {"sent": sent.get(name, 0), "received": by_actor[name] if trainers else None} for name in by_actor
        },
        "incomplete": incomplete,  # traces that end at their last flush (killed workers): lower bounds
        "checked_against_summary": comparable,  # the counters of summary.json the traces were held against
        "mismatches": mismatches,
    }


def _frames(worker: WorkerTrace, table: str) -> int:
    return int(np.sum(worker.table(table).get("frames", 0)))
