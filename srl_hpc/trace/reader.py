"""Read the trace files of a run directory into plain tables: every file under RUN/traces/, where
trace.writer puts one <kind>-<index>.h5 per worker and attempt (<kind>-<index>.attempt-N.h5 for a resumed
run's attempt N, .restart-K added by a restarted worker's K-th replacement: read as one trace, one file
after the other). Anything else found there is
reported, not skipped.

Runs that crashed or were killed are the ones people debug, so reading never gives up on a run because of
one bad file: a file that is not HDF5, is truncated, or is not an srl-hpc trace becomes a `Problem` naming
the file and the reason, and the other files are read. A table whose fields have unequal lengths (a
worker killed in the middle of a flush) is cut to its shortest field, with a note.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from srl_hpc import config, graph
from srl_hpc.trace.writer import open_trace

FORMAT = "srl-hpc-trace/1"
# what h5py raises on damaged files or metadata, depending on where the damage is
HDF5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, AttributeError)

Table = dict[str, np.ndarray]  # field -> 1-D array, all the same length; "t" is unix time of each row


class TraceError(Exception):
    """The run cannot be analysed at all (no such directory, no trace files, none readable)."""


@dataclass
class Problem:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path.name}: {self.reason}"


@dataclass
class WorkerTrace:
    name: str  # "actor/0"
    path: Path
    attrs: dict
    tables: dict[str, Table]
    notes: list[str] = field(default_factory=list)  # data read but adjusted or incomplete
    handlers: tuple[str, ...] = ()  # the task handlers the run's graph put in this worker
    policy: str = ""  # with several policies: the one this trainer trains or policy worker serves
    attempts: int = 1  # a resumed run: its attempts' files read as one trace
    restarts: int = 0  # a restarted worker: its replacements' files, read as the same trace
    # every row it recorded is here: each of its files was closed (not cut short by a kill) and not capped
    complete: bool = True

    @property
    def kind(self) -> str:
        return self.name.partition("/")[0]

    def table(self, name: str) -> Table:
        """The named table, or an empty one (a worker that never reached that point)."""
        return self.tables.get(name, {"t": np.empty(0)})


@dataclass
class RunTrace:
    run_dir: Path
    workers: list[WorkerTrace]
    problems: list[Problem]
    meta: dict  # experiment name and the controller's summary.json, where present
    policies: list[str] = field(default_factory=list)  # several policies: their names (actors' episodes say which)

    def hosting(self, handler: str) -> list[WorkerTrace]:
        """The workers that host a task handler (an IMPALA actor hosts "actor" and "policy")."""
        return [w for w in self.workers if handler in w.handlers]

    def pooled(self, handler: str, table: str, field: str) -> np.ndarray:
        """One field of one table, the workers hosting a handler concatenated."""
        values = [w.table(table)[field] for w in self.hosting(handler) if field in w.table(table)]
        return np.concatenate(values) if values else np.empty(0)

    @property
    def t0(self) -> float:
        """Start of the run: the earliest worker start (unix time); times in reports are relative to it."""
        starts = [float(w.attrs["started"]) for w in self.workers if "started" in w.attrs]
        if starts:
            return min(starts)
        firsts = [tab["t"][0] for w in self.workers for tab in w.tables.values() if len(tab["t"])]
        return min(firsts) if firsts else 0.0


def read_run(run_dir: str | Path) -> RunTrace:
    """All trace files of a run. Raises TraceError only when there is nothing at all to analyse."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: no such run directory")
    traces = run_dir / "traces"
    files = sorted(p for p in traces.iterdir() if p.is_file()) if traces.is_dir() else []
    if not files:
        raise TraceError(f"{run_dir}: no trace files under {traces} (was the run started with monitor.trace off?)")
    workers, problems = [], []
    for path in sorted(files, key=_attempt_of):
        worker, file_problems = read_file(path)
        problems += file_problems
        if worker is not None:
            workers.append(worker)
    workers = _join_attempts(workers)
    if not workers:
        raise TraceError(
            f"{run_dir}: none of the {len(files)} trace files could be read:\n" + "\n".join(f"  {p}" for p in problems)
        )
    nodes = _graph_nodes(run_dir)
    for w in workers:
        node = nodes.get(w.name)
        w.handlers, w.policy = (node.handlers, node.policy) if node else ((w.kind,), "")
    names = list(nodes)
    workers.sort(key=lambda w: (names.index(w.name) if w.name in names else len(names), w.name))
    policies = list(dict.fromkeys(n.policy for n in nodes.values() if n.policy))
    return RunTrace(run_dir, workers, problems, _run_meta(run_dir), policies)


def _attempt_of(path: Path) -> tuple[int, int, str]:
    """A resumed run's attempt N writes <worker>.attempt-N.h5 (the first attempt <worker>.h5); the K-th
    replacement of a restarted worker adds .restart-K. Sorted by (attempt, restart): time order."""
    attempt = re.search(r"\.attempt-(\d+)(\.restart-\d+)?\.h5$", path.name)
    restart = re.search(r"\.restart-(\d+)\.h5$", path.name)
    return (int(attempt[1]) if attempt else 1, int(restart[1]) if restart else 0, path.name)


def _join_attempts(workers: list[WorkerTrace]) -> list[WorkerTrace]:
    """One WorkerTrace per worker: the tables of a resumed run's attempts (and of a restarted worker's
    incarnations), one after the other."""
    joined: dict[str, WorkerTrace] = {}
    for w in workers:  # in attempt order
        first = joined.get(w.name)
        if first is None:
            joined[w.name] = w
            continue
        for name, table in w.tables.items():
            if name not in first.tables:
                first.tables[name] = table
            elif set(table) == set(first.tables[name]):
                first.tables[name] = {k: np.concatenate([first.tables[name][k], table[k]]) for k in table}
            else:
                first.notes.append(
                    f"table {name!r} of {w.path.name} has other fields than the first attempt's: left out"
                )
        first.notes += w.notes
        first.complete = first.complete and w.complete
        if _attempt_of(w.path)[1]:
            first.restarts += 1
        else:
            first.attempts += 1
    return list(joined.values())


def read_file(path: Path) -> tuple[WorkerTrace | None, list[Problem]]:
    """One trace file -> (its worker's tables or None, problems). Tables that fail alone are skipped."""
    if path.stat().st_size == 0:
        return None, [Problem(path, "empty file (the worker died while creating it?)")]
    if not h5py.is_hdf5(path):
        return None, [Problem(path, "not an HDF5 file")]
    try:
        with open_trace(path) as f:  # unlocked: shared filesystems refuse locks; a live writer would trip on one
            return _read_open(f, path)
    except HDF5_ERRORS as e:
        return None, [Problem(path, _open_failure(e))]


def _read_open(f: h5py.File, path: Path) -> tuple[WorkerTrace | None, list[Problem]]:
    attrs = {k: _plain(v) for k, v in f.attrs.items()}
    if attrs.get("format") != FORMAT:
        return None, [
            Problem(path, f"not an srl-hpc trace (format attribute {attrs.get('format')!r}, expected {FORMAT!r})")
        ]
    worker = WorkerTrace(str(attrs.get("worker") or path.stem.replace("-", "/", 1)), path, attrs, {})
    problems = []
    for name, group in f.items():
        try:
            columns = {k: np.asarray(ds[()]) for k, ds in group.items()}
        except HDF5_ERRORS as e:
            problems.append(Problem(path, f"table {name!r} unreadable: {_short(e)}"))
            continue
        worker.tables[name] = _cut_to_shortest(name, columns, worker.notes)
    if "flushed" not in attrs:
        worker.notes.append("never flushed: the worker recorded nothing or died within its first flush interval")
    worker.complete = "closed" in attrs and "capped_at" not in attrs
    if "capped_at" in attrs:
        worker.notes.append(
            f"size cap reached {attrs['capped_at'] - attrs.get('started', 0):.1f}s after start: "
            "nothing was recorded after that"
        )
    return worker, problems


def _cut_to_shortest(name: str, columns: Table, notes: list[str]) -> Table:
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        n = min(lengths)
        notes.append(
            f"table {name!r}: fields of unequal length ({n}..{max(lengths)} rows; killed mid-flush?), cut to {n} rows"
        )
        columns = {k: v[:n] for k, v in columns.items()}
    columns.setdefault("t", np.empty(0))
    return columns


def _run_meta(run_dir: Path) -> dict:
    meta = {}
    with contextlib.suppress(OSError, yaml.YAMLError, AttributeError):
        meta["experiment"] = yaml.safe_load((run_dir / "experiment.yaml").read_text()).get("name")
    with contextlib.suppress(OSError, ValueError):
        meta["summary"] = json.loads((run_dir / "summary.json").read_text())
    return meta


def _graph_nodes(run_dir: Path) -> dict[str, graph.WorkerNode]:
    """worker -> its node (handlers, policy), in task order, from the run's own graph (empty if experiment.yaml
    is unusable: then a worker is assumed to host the handler its name says)."""
    try:
        return {w.name: w for w in graph.build(config.load(run_dir / "experiment.yaml")).workers}
    except (config.ConfigError, OSError):
        return {}


def _open_failure(exc: Exception) -> str:
    sizes = re.search(r"truncated file: eof = (\d+).*stored_eof = (\d+)", str(exc))
    if sizes:
        return f"truncated: {int(sizes[1]):,} of its {int(sizes[2]):,} bytes are there"
    return f"cannot read as HDF5 (corrupt?): {_short(exc)}"


def _plain(value: object) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value.item() if isinstance(value, np.generic) else value


def _short(exc: BaseException) -> str:
    """HDF5 messages carry a C call chain; the first line says what went wrong."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
