"""The run's scalars for dashboards: the controller writes what it knows at every progress line, with the
run's env frames as the step, so the curves of a resumed run go on where they stopped.

- TensorBoard (monitor.tensorboard, on by default): event files in RUN/tb/, by tensorboard's own
  framework-free writer (the controller does not import torch). `tensorboard --logdir RUN/tb`.
- Weights & Biases (monitor.wandb: {project: ...}, when the wandb package is installed): the same scalars
  in a W&B run kept in RUN/wandb/, offline by default; every attempt of a run logs to the same W&B run.
"""

from __future__ import annotations

import hashlib
import math

from srl_hpc.config import Experiment, to_dict
from srl_hpc.rundir import RunDir


class Board:
    def __init__(self, exp: Experiment, run_dir: RunDir) -> None:
        self._tensorboard = self._wandb = None
        self.where: list[str] = []  # where the scalars go, for the progress output
        if exp.monitor.tensorboard:
            from tensorboard.summary import Writer  # half a second of imports, only for runs that write one

            run_dir.tensorboard.mkdir(parents=True, exist_ok=True)
            self._tensorboard = Writer(str(run_dir.tensorboard))
            self.where.append(f"TensorBoard: tensorboard --logdir {run_dir.tensorboard}")
        if exp.monitor.wandb is not None:
            import wandb

            cfg = exp.monitor.wandb
            run_id = hashlib.sha1(str(run_dir.root.resolve()).encode()).hexdigest()[:16]  # the same for every attempt
            self._wandb = wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                mode=cfg.mode,
                dir=str(run_dir.root),
                name=run_dir.root.name,
                id=run_id,
                resume="allow",
                config=to_dict(exp),
            )
            self.where.append(f"W&B ({cfg.mode}): {self._wandb.dir}")

    def write(self, step: int, scalars: dict[str, float | None]) -> None:
        """One point per tag at `step`; a tag without a value yet (None, nan) is left out."""
        values = {tag: float(v) for tag, v in scalars.items() if v is not None and math.isfinite(v)}
        if self._tensorboard is not None:
            for tag, value in values.items():
                self._tensorboard.add_scalar(tag, value, step=step)
            self._tensorboard.flush()  # a progress line every few seconds: readers see it at once
        if self._wandb is not None:
            self._wandb.log(values, step=step)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
