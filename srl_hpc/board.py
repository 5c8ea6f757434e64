"""TensorBoard scalars of a run (monitor.tensorboard): the controller writes what it knows at every progress
line into RUN/tb/, with the run's env frames as the step, so the curves of a resumed run go on where they
stopped. The writer is tensorboard's own framework-free one: the controller does not import torch.

    tensorboard --logdir RUN/tb          (or the runs directory, to compare runs)
"""
from __future__ import annotations

import math
from pathlib import Path


class Board:
    def __init__(self, directory: Path):
        from tensorboard.summary import Writer  # half a second of imports, only for runs that write one

        directory.mkdir(parents=True, exist_ok=True)
        self._writer = Writer(str(directory))

    def write(self, step: int, scalars: dict[str, float | None]) -> None:
        """One point per tag at `step`; a tag without a value yet (None, nan) is left out."""
        for tag, value in scalars.items():
            if value is not None and math.isfinite(value):
                self._writer.add_scalar(tag, value, step=step)
        self._writer.flush()  # a progress line every few seconds: readers see it at once

    def close(self) -> None:
        self._writer.close()
