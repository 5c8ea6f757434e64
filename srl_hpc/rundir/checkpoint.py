"""A policy's checkpoint (RUN/checkpoints/<policy>.pt, rundir.RunDir.checkpoint_of): what its first trainer
writes, replaced atomically, and what reads it back: a resumed run's trainers (everything), its policy and
evaluation workers (the weights, to act with from the first request), and `srl-launch enjoy`.

It holds the trained version and counters, the attempt that wrote it, torch's RNG state, the model's
weights, the parameter database's index (its versions and tags when the checkpoint was written) and whatever
the algorithm's state_dict() adds (its optimizer's state, ...).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists()

    def save(
        self,
        model: torch.nn.Module,
        algorithm,
        version: int,
        frames_consumed: int,
        transitions_trained: int,
        attempt: int,
        parameter_index: dict,
    ) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save(
            {
                "version": version,
                "frames_consumed": frames_consumed,
                "transitions_trained": transitions_trained,
                "attempt": attempt,
                "rng": torch.get_rng_state(),
                "model": model.state_dict(),
                "parameter_index": parameter_index,
                **algorithm.state_dict(),
            },
            tmp,
        )
        os.replace(tmp, self.path)  # a reader never sees a half-written checkpoint

    def restore(self, model: torch.nn.Module, algorithm, device: torch.device) -> dict[str, Any]:
        """A trainer's everything: weights, the algorithm's state and torch's RNG; returns the counters
        (version, frames_consumed, transitions_trained) and the parameter database's index (None from a
        checkpoint written before the database existed)."""
        state = torch.load(self.path, map_location=device)
        model.load_state_dict(state["model"])
        algorithm.load_state_dict(state)
        torch.set_rng_state(state["rng"].cpu())
        return {
            **{k: state[k] for k in ("version", "frames_consumed", "transitions_trained")},
            "parameter_index": state.get("parameter_index"),
        }

    def load_weights(self, model: torch.nn.Module) -> int:
        """The model's weights only (acting with them); returns their version."""
        state = torch.load(self.path, map_location="cpu")
        model.load_state_dict(state["model"])
        return state["version"]
