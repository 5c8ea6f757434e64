"""Per-worker HDF5 traces: RUN/traces/<kind>-<index>.h5, one file per worker, no cross-process locking.

Layout: one group per table (e.g. /inference), one 1-D chunked, compressed dataset per field, all of
equal length; field "t" is the wall-clock time (unix seconds) of each row. Rows are buffered in memory
and appended every `flush_interval` seconds by opening the file, extending the datasets and closing it
again, so a worker killed at any other moment leaves a file that reads up to its last flush. A cap
bounds the file; when reached, recording stops and the file's attribute `capped_at` says when.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import h5py
import numpy as np

DEFAULT_MAX_BYTES = 256 * 2**20
CHUNK_ROWS = 4096
CHECK_EVERY = 64  # records between looks at the clock for a due flush


class TraceWriter:
    def __init__(self, path: str | Path, worker: str, flush_interval: float = 2.0,
                 max_bytes: int = DEFAULT_MAX_BYTES, enabled: bool = True):
        self.path = Path(path)
        self.worker = worker
        self.flush_interval = flush_interval
        self.max_bytes = max_bytes
        self.enabled = enabled
        self._rows: dict[str, tuple[tuple[str, ...], list[tuple]]] = {}  # table -> (field names, rows)
        self._since_check = 0
        self._last_flush: float | None = None  # set by the first record, so it is not flushed alone
        self.capped = False
        self._lock = threading.Lock()  # the trainer records from its pre-fetch thread too
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with h5py.File(self.path, "w") as f:
                f.attrs["worker"] = worker
                f.attrs["pid"] = os.getpid()
                f.attrs["host"] = os.uname().nodename
                f.attrs["started"] = time.time()
                f.attrs["format"] = "srl-hpc-trace/1"

    def record(self, table: str, **fields) -> None:
        """Append one row; a table's fields (and their order) are fixed by its first row. Cheap: one tuple."""
        if not self.enabled or self.capped:
            return
        with self._lock:
            entry = self._rows.get(table)
            if entry is None:
                entry = self._rows[table] = (("t", *fields), [])
            entry[1].append((time.time(), *fields.values()))
            self._since_check += 1
        if self._since_check < CHECK_EVERY:
            return
        self._since_check = 0
        if self._last_flush is None:
            self._last_flush = time.monotonic()
        elif time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self.enabled or self.capped or not any(rows for _, rows in self._rows.values()):
            return
        with h5py.File(self.path, "a") as f:
            for table, (names, rows) in self._rows.items():
                if not rows:
                    continue
                group = f.require_group(table)
                for name, values in zip(names, zip(*rows)):
                    data = np.asarray(values)
                    if name not in group:  # lzf: compresses these columns well at a fraction of gzip's cost
                        group.create_dataset(name, data=data, maxshape=(None,), chunks=(CHUNK_ROWS,),
                                             compression="lzf")
                    else:
                        ds = group[name]
                        ds.resize(ds.shape[0] + len(data), axis=0)
                        ds[-len(data):] = data
                rows.clear()
            f.attrs["flushed"] = time.time()
            if self.path.stat().st_size >= self.max_bytes:
                f.attrs["capped_at"] = time.time()
                self.capped = True

    def close(self) -> None:
        self.flush()
