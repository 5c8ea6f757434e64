"""Parameter database: the stored versions of one policy's weights, with tags, in the run directory.

The parameter stream carries the newest weights to the workers that act; this store keeps the history that
other things need: opponents from the past, the version evaluation found best, `enjoy --tag`, a resumed run.
It lives on the run directory's filesystem, which on a cluster is a shared one (NFS, Lustre, GPFS) that may
not honour locks, so nothing here locks. A version is one .npz written under a temporary name and renamed
into place (a rename within a directory is atomic on POSIX filesystems): a reader sees a whole version or
none. A tag is a small JSON file naming one version (and what the tagger adds, e.g. a score), replaced the
same way. Versions are written once and never change; a reader whose tag's version was collected between
reading the tag and the version (the tag moved on) reads the tag again.

    RUN/parameters/<policy>/v000000042.npz   version 42: the model's state as published (weights and buffers)
    RUN/parameters/<policy>/tags/<tag>       {"version": 42, ...}: latest, best, snapshot-40, a user's own
    RUN/parameters/<policy>/ratings.json     self-play: the rating workers' game results and Elo per version
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import numpy as np

LATEST = "latest"  # the version of the policy's last checkpoint
BEST = "best"  # the version evaluation scored highest
SNAPSHOT = "snapshot-"  # + version: every workers.trainer.snapshot_every-th version, kept until untagged
TAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RATINGS = "ratings.json"
STALE_TEMPORARY_SECONDS = 600.0  # a temporary file this old belongs to a writer that died: collected
RETRIES = 100  # re-reads of a tag whose version vanished before a reader gives up (a writer far faster than it)


class VersionNotFound(FileNotFoundError):
    """No such version or tag in the store (a missing file, as the CLI's exit codes count it)."""


def snapshot_tag(version: int) -> str:
    return f"{SNAPSHOT}{version}"


class ParameterDB:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.tag_dir = self.root / "tags"

    def _version_path(self, version: int) -> Path:
        return self.root / f"v{version:09d}.npz"

    def _write_atomically(self, path: Path, write) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def put(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        """Store a version (again: the same weights, so a second writer changes nothing a reader sees)."""
        if version < 0:
            raise ValueError(f"a version is >= 0, got {version}")
        self._write_atomically(self._version_path(version), lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]

    def has(self, version: int) -> bool:
        return self._version_path(version).exists()

    def versions(self) -> list[int]:
        return sorted(int(p.name[1:-4]) for p in self.root.glob("v*.npz"))

    def tag(self, tag: str, version: int, **info) -> None:
        """Point `tag` at a stored version (moving it if it pointed elsewhere); `info` is kept with it."""
        if not TAG_NAME.match(tag):
            raise ValueError(f"tag {tag!r}: letters, digits, '_', '.' and '-' only, not starting with '.', '-' or '_'")
        if not self.has(version):
            raise VersionNotFound(f"{self.root}: no version {version} to tag {tag!r} (stored: {self._stored()})")
        record = json.dumps({"version": version, **info}).encode()
        self._write_atomically(self.tag_dir / tag, lambda f: f.write(record))

    def untag(self, tag: str) -> None:
        (self.tag_dir / tag).unlink(missing_ok=True)

    def tags(self) -> dict[str, dict]:
        """Every tag -> its record ({"version": N, ...})."""
        out = {}
        for path in sorted(self.tag_dir.glob("[!.]*")):
            try:
                out[path.name] = json.loads(path.read_text())
            except FileNotFoundError:  # untagged while listing
                continue
        return out

    def resolve(self, tag: str) -> int:
        try:
            return json.loads((self.tag_dir / tag).read_text())["version"]
        except FileNotFoundError:
            raise VersionNotFound(f"{self.root}: no tag {tag!r} (tags: {', '.join(self.tags()) or 'none'})") from None

    def get(self, version: int | None = None, tag: str | None = None) -> tuple[int, dict[str, np.ndarray]]:
        """(version, arrays) of a version given by number or by tag; the newest stored when neither is."""
        if version is not None and tag is not None:
            raise ValueError("a version or a tag, not both")
        for _ in range(RETRIES):
            wanted = version if version is not None else self.resolve(tag) if tag is not None else self._newest()
            try:
                with np.load(self._version_path(wanted), allow_pickle=False) as stored:
                    return wanted, {k: stored[k] for k in stored.files}
            except FileNotFoundError:
                if version is not None:
                    raise VersionNotFound(f"{self.root}: no version {version} (stored: {self._stored()})") from None
        raise VersionNotFound(f"{self.root}: the version of {tag or 'the newest'} kept vanishing while read")

    def _newest(self) -> int:
        versions = self.versions()
        if not versions:
            raise VersionNotFound(f"{self.root}: no version stored")
        return versions[-1]

    def _stored(self) -> str:
        versions = self.versions()
        return f"{len(versions)} versions, {versions[0]}..{versions[-1]}" if versions else "none"

    def ratings(self) -> dict:
        """The rating workers' record ({} before their first round): see srl_hpc/handlers/rating.py."""
        try:
            return json.loads((self.root / RATINGS).read_text())
        except FileNotFoundError:
            return {}

    def write_ratings(self, record: dict) -> None:
        data = json.dumps(record).encode()
        self._write_atomically(self.root / RATINGS, lambda f: f.write(data))

    def collect(self, keep_newest: int) -> list[int]:
        """Garbage collection: remove every version that no tag names, except the newest `keep_newest`
        (and temporary files left by writers that died). Returns the versions removed."""
        tagged = {record["version"] for record in self.tags().values()}
        versions = self.versions()
        newest = set(versions[len(versions) - keep_newest :]) if keep_newest > 0 else set()
        removed = [v for v in versions if v not in tagged and v not in newest]
        for v in removed:
            self._version_path(v).unlink(missing_ok=True)
        now = time.time()
        for tmp in [*self.root.glob(".*.tmp"), *self.tag_dir.glob(".*.tmp")]:
            try:
                if now - tmp.stat().st_mtime > STALE_TEMPORARY_SECONDS:
                    tmp.unlink()
            except FileNotFoundError:
                continue
        return removed

    def index(self) -> dict:
        """What a checkpoint keeps of the store: the versions stored and the tags, as they are now."""
        return {"versions": self.versions(), "tags": self.tags()}

    def restore(self, index: dict) -> None:
        """A resumed run's store, as its checkpoint left it: versions written after the checkpoint (by the
        attempt that crashed or was cancelled before its next one) are removed, since the resumed attempt
        trains its own versions under those numbers; tags go back to what they were."""
        kept = set(index["versions"])
        newest = max(kept, default=-1)
        for v in self.versions():
            if v > newest:
                self._version_path(v).unlink(missing_ok=True)
        for tag in self.tags():
            if tag not in index["tags"]:
                self.untag(tag)
        for tag, record in index["tags"].items():
            if self.has(record["version"]):
                info = {k: v for k, v in record.items() if k != "version"}
                self.tag(tag, record["version"], **info)
        ratings = self.ratings()
        if ratings:  # games of versions the resumed attempt will train anew are not theirs
            ratings["games"] = [
                g for g in ratings["games"] if all(not isinstance(p, int) or p <= newest for p in g[:2])
            ]
            self.write_ratings(ratings)
