"""Per-worker HDF5 traces: RUN/traces/<kind>-<index>.h5, one file per worker, no cross-process locking.

Layout: one group per table (e.g. /inference), one 1-D chunked, compressed dataset per field, all of
equal length; field "t" is the wall-clock time (unix seconds) of each row. Rows are buffered in memory
and appended every `flush_interval` seconds (looked for every CHECK_EVERY rows, and at each heartbeat of the
worker: flush_if_due), then the file is flushed (H5Fflush), so a worker killed at any other moment leaves a
file that reads up to its last flush; a worker that closes its trace marks it `closed`. A cap bounds the
file; when reached, recording stops and the file's attribute `capped_at` says when.

The file stays open from the worker's start to its close. Run directories live on shared filesystems
(Lustre, GPFS, NFS) whose metadata server every worker of a run shares: reopening the file at every flush
cost each worker an open, a close and a stat there every 2 s (10,000 workers: 15,000 metadata operations
a second, for nothing); a flush of an open file writes data only. Readers of a running run (srl-trace during
the run, tests/test_trace.py's read before a SIGKILL) still see everything up to the last flush: the flush
writes all of HDF5's dirty metadata and chunks, and between flushes the writer does not touch the file
(on NFS, a reader on another host sees what the writer's host has written back so far, not necessarily
the last flush: a live read there may lag or fail until it is tried again; Lustre and GPFS are coherent).
That needs the file's superblock to carry no "open for writing" flag, which HDF5 sets only for file
formats from 1.10 on (libver "v110" and later, SWMR): hence libver "earliest", h5py's default, stated.

Neither the writer nor the reader (srl_hpc.trace.reader) locks the file (locking=False): many shared
filesystems have no working flock, and HDF5's lock then failed every worker at its start ("unable to lock
file"). One writer per file, so no lock is needed.
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


def open_trace(path: str | Path, mode: str = "r") -> h5py.File:
    """An HDF5 file of a run, opened as every reader and writer of the run's traces must: without locks
    (shared filesystems refuse them) and in the earliest file format (no "open for writing" flag that would
    keep readers of a running run out, or out for good of a killed worker's file)."""
    return h5py.File(path, mode, locking=False, libver="earliest")


class TraceWriter:
    def __init__(
        self,
        path: str | Path,
        worker: str,
        flush_interval: float = 2.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        enabled: bool = True,
    ) -> None:
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
        self._file: h5py.File | None = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_trace(self.path, "w")
            self._file.attrs["worker"] = worker
            self._file.attrs["pid"] = os.getpid()
            self._file.attrs["host"] = os.uname().nodename
            self._file.attrs["started"] = time.time()
            self._file.attrs["format"] = "srl-hpc-trace/1"
            self._file.flush()

    def record(self, table: str, **fields) -> None:
        """Append one row; a table's fields (and their order) are fixed by its first row. Cheap: one tuple."""
        if self._file is None or self.capped:
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

    def flush_if_due(self) -> None:
        """Flush if `flush_interval` has passed since the last one. record() looks at the clock only every
        CHECK_EVERY rows, which a worker that records little (an evaluation worker: a round and a heartbeat a
        second) takes minutes to write; its heartbeat calls this, so that no worker's rows wait longer."""
        if self._last_flush is None:
            self._last_flush = time.monotonic()
        elif time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        f = self._file
        if f is None or self.capped or not any(rows for _, rows in self._rows.values()):
            return
        for table, (names, rows) in self._rows.items():
            if not rows:
                continue
            group = f.require_group(table)
            for name, values in zip(names, zip(*rows)):
                data = np.asarray(values)
                if name not in group:  # lzf: compresses these columns well at a fraction of gzip's cost
                    group.create_dataset(name, data=data, maxshape=(None,), chunks=(CHUNK_ROWS,), compression="lzf")
                else:
                    ds = group[name]
                    ds.resize(ds.shape[0] + len(data), axis=0)
                    ds[-len(data) :] = data
            rows.clear()
        f.attrs["flushed"] = time.time()
        if f.id.get_filesize() >= self.max_bytes:  # HDF5's own count: no stat on the metadata server
            f.attrs["capped_at"] = time.time()
            self.capped = True
        f.flush()

    def close(self) -> None:
        """Flush and mark the file `closed`: a reader then knows it holds every row the worker recorded (a killed
        worker's file ends at its last flush, unmarked)."""
        with self._lock:
            self._flush()
            if self._file is not None:
                self._file.attrs["closed"] = time.time()
                self._file.close()
                self._file = None
