"""A trainer's next batch, made ready while the current one trains (workers.trainer.prefetch): assembled by
a thread of its own and, on a GPU, copied to the device on a side stream that overlaps the update."""

from __future__ import annotations

import queue
import threading

import torch

from srl_hpc.handlers import POLL_MS


class Prefetcher:
    """Polls a batch source in a thread, one batch ahead and no further: the one after waits until the next
    is taken (its segments wait at the actors, unfilled, not here going stale)."""

    def __init__(self, source) -> None:
        self.source = source
        self._batches: queue.Queue = queue.Queue(maxsize=1)
        self._taken = threading.Event()  # the next batch was taken: the thread may assemble another
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="prefetch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self._batches.full():
                    self._taken.wait(POLL_MS / 1000)
                    self._taken.clear()
                    continue
                batch = self.source.poll(POLL_MS)
                if batch is not None:
                    self._batches.put(batch)  # never blocks: only this thread puts, and the queue had room
        except BaseException as e:  # surfaced by next() in the trainer's thread
            self._error = e

    def next(self, timeout_ms: int) -> dict | None:
        if self._error is not None:
            raise RuntimeError("the trainer's pre-fetch thread failed") from self._error
        try:
            batch = self._batches.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None
        self._taken.set()
        return batch

    def ready(self) -> int:
        """Batches assembled and not taken yet."""
        return self._batches.qsize()

    def stop(self) -> list[dict]:
        """Ends the thread; returns the batches it had made ready, which will not be trained."""
        self._stop.set()
        self._thread.join()
        left = []
        while not self._batches.empty():
            left.append(self._batches.get())
        return left


class DeviceCopy:
    """A batch's tensors to a GPU from pinned memory on a side stream, so that with pre-fetch on the copy
    overlaps the update running on the main stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._stream: torch.cuda.Stream | None = None

    def to_device(self, tensors: dict) -> dict:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._stream):
            tensors = {k: t.pin_memory().to(self.device, non_blocking=True) for k, t in tensors.items()}
            ready = torch.cuda.Event()
            ready.record(self._stream)
        return {**tensors, "_ready": ready}

    def wait(self, tensors: dict) -> dict:
        """The batch, once its side-stream copy has finished for the main stream."""
        ready = tensors.pop("_ready")
        main = torch.cuda.current_stream(self.device)
        main.wait_event(ready)
        for t in tensors.values():
            t.record_stream(main)  # the allocator must not hand this memory to the next copy too early
        return tensors
