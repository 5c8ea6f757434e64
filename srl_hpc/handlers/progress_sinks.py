"""Where the controller's progress goes: every sink is fed the same dict of scalars (RunTotals.progress) and
shows its own part of it: the console line, a row of RUN/metrics.csv, TensorBoard and W&B (srl_hpc.handlers.board)."""

from __future__ import annotations

import csv
import sys

from srl_hpc.handlers.board import Board
from srl_hpc.rundir import RunDir

METRICS_COLUMNS = (
    "wall_time",
    "env_frames",
    "frames_consumed",
    "sample_fps",
    "train_fps",
    "episodes",
    "mean_return",
    "policy_version",
    "policy_lag",
    "frames_dropped",
    "malformed_dropped",
    "eval_return",
)  # the mean return of the latest evaluation round (workers.eval)
METRICS_DIGITS = {"wall_time": 2, "sample_fps": 1, "train_fps": 1, "mean_return": 3, "policy_lag": 3, "eval_return": 3}

BOARD_TAGS = {  # scalar -> its dashboard tag; names that have a "/" are tags already
    "mean_return": "episode/return_mean",  # over the last stop.return_window episodes (the stop rule's)
    "episode_return": "episode/return",
    "episode_length": "episode/length",
    "episodes": "episode/count",
    "sample_fps": "throughput/sample_fps",
    "train_fps": "throughput/train_fps",
    "policy_version": "policy/version",
    "policy_lag": "policy/lag",
    "frames_dropped": "frames/dropped",
    "malformed_dropped": "frames/malformed_dropped",
    "replay_ratio": "replay/ratio",
}


class Console:
    """The controller's lines on stdout (the run's log): what happens, and a progress line now and then."""

    def __init__(self, policies: list[str], shows_eval: bool, out=None) -> None:
        self.policies = policies  # several: each one's return instead of the run's
        self.shows_eval = shows_eval
        self.out = out or sys.stdout

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def write(self, s: dict) -> None:
        ret = f"{s['mean_return']:7.1f}" if s["mean_return"] is not None else "      -"
        if self.policies:
            ret = " ".join(
                f"{name} " + (f"{s[f'{name}/return_mean']:.1f}" if s[f"{name}/return_mean"] is not None else "-")
                for name in self.policies
            )
        shown = (
            ""
            if not self.shows_eval
            else " | eval " + (f"{s['eval_return']:7.1f}" if s["eval_return"] is not None else "      -")
        )
        self.line(
            f"[{s['wall_time']:7.1f}s] frames {s['env_frames']:>11,} | sample {s['sample_fps']:8,.0f} fps | "
            f"train {s['train_fps']:8,.0f} fps | episodes {s['episodes']:>7,} | return {ret} | version "
            f"{s['policy_version']:>5} | lag {s['policy_lag']:4.1f}{shown}"
        )


class MetricsCsv:
    """RUN/metrics.csv: a row per progress line; a resumed run's rows continue the file."""

    def __init__(self, run_dir: RunDir, resumed: bool) -> None:
        self._file = open(run_dir.metrics, "a" if resumed else "w", newline="")
        self._writer = csv.writer(self._file)
        if not resumed:
            self._writer.writerow(METRICS_COLUMNS)

    def write(self, s: dict) -> None:
        self._writer.writerow(
            [
                "" if s[c] is None else round(s[c], METRICS_DIGITS[c]) if c in METRICS_DIGITS else s[c]
                for c in METRICS_COLUMNS
            ]
        )
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class Dashboards:
    """TensorBoard and W&B (monitor.tensorboard, monitor.wandb), stepped by the run's env frames."""

    def __init__(self, board: Board) -> None:
        self.board = board

    def write(self, s: dict) -> None:
        tagged = {BOARD_TAGS.get(k, k): v for k, v in s.items() if k in BOARD_TAGS or "/" in k}
        self.board.write(s["env_frames"], tagged)

    def evaluation(self, evaluation: dict) -> None:
        """An evaluation round (workers.eval), at the env frames it was reported at."""
        lengths = evaluation["lengths"]
        self.board.write(
            evaluation["env_frames"],
            {
                "eval/return": evaluation["mean_return"],
                "eval/length": sum(lengths) / len(lengths) if lengths else None,
                "eval/version": evaluation["version"],
            },
        )

    def close(self) -> None:
        self.board.close()
