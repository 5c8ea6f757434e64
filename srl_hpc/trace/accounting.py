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
        for index, frames in zip(segments.get("actor", []), segments.get("frames", [])):
            name = f"actor/{int(index)}"
            by_actor[name] = by_actor.get(name, 0) + int(frames)
        if "dropped" in segments:
            dropped += int(segments["frames"][segments["dropped"].astype(bool)].sum())
        dropped += _frames(w, "dropped_at_stop")
        consumed += _frames(w, "train_step")
    receivers = trainers or buffers
    received = sum(by_actor.values()) if trainers else sum(_frames(w, "segment") for w in buffers)
    incomplete = sorted(w.name for w in (*actors, *receivers) if not w.complete)
    receivers_complete = all(w.complete for w in receivers)
    mismatches = []
    if trainers and receivers_complete and received != consumed + dropped:
        mismatches.append(f"received {received:,} != trained {consumed:,} + dropped {dropped:,}")
    if receivers_complete:
        if trainers:
            mismatches += [
                f"{name} sent {sent[name]:,}, the trainers received {by_actor[name]:,} from it"
                for name in sent
                if sent[name] != by_actor[name] and name not in incomplete
            ]
        if all(w.complete for w in actors) and sum(sent.values()) != received:
            mismatches.append(f"sent {sum(sent.values()):,} != received {received:,}")
    return {
        "sent": sum(sent.values()),
        "received": received,
        "consumed": consumed if trainers else None,
        "dropped": dropped if trainers else None,
        "by_actor": {
            name: {"sent": sent.get(name, 0), "received": by_actor[name] if trainers else None} for name in by_actor
        },
        "incomplete": incomplete,  # traces that end at their last flush (killed workers): lower bounds
        "mismatches": mismatches,
    }


def _frames(worker: WorkerTrace, table: str) -> int:
    return int(np.sum(worker.table(table).get("frames", 0)))
