"""The parameter database (srl_hpc/services/parameter_db.py): a filesystem store with no locks."""

import multiprocessing
import os
import time

import numpy as np
import pytest

from srl_hpc.services.parameter_db import STALE_TEMPORARY_SECONDS, ParameterDB, VersionNotFound, snapshot_tag


def weights(version: int) -> dict[str, np.ndarray]:
    """Arrays whose every element says which version they are (a torn read would mix two)."""
    return {"w": np.full((64, 64), version, np.float32), "b": np.full(64, version, np.float64)}


def test_versions_and_tags_survive_a_restart(tmp_path):
    db = ParameterDB(tmp_path / "p")
    for v in (0, 5, 10):
        db.put(v, weights(v))
    db.tag("latest", 10)
    db.tag("best", 5, mean_return=412.5)
    again = ParameterDB(tmp_path / "p")  # another process, or the same run's next attempt
    assert again.versions() == [0, 5, 10]
    assert again.tags() == {"best": {"version": 5, "mean_return": 412.5}, "latest": {"version": 10}}
    version, arrays = again.get(tag="best")
    assert version == 5 and np.array_equal(arrays["w"], weights(5)["w"]) and arrays["b"].dtype == np.float64
    assert again.get()[0] == 10  # neither a version nor a tag: the newest
    assert again.get(version=0)[0] == 0


def test_a_missing_version_or_tag_is_refused_naming_what_is_stored(tmp_path):
    db = ParameterDB(tmp_path / "p")
    with pytest.raises(VersionNotFound, match="no version stored"):
        db.get()
    db.put(3, weights(3))
    with pytest.raises(VersionNotFound, match=r"no tag 'best' \(tags: none\)"):
        db.get(tag="best")
    with pytest.raises(VersionNotFound, match=r"no version 7 to tag 'x' \(stored: 1 versions, 3..3\)"):
        db.tag("x", 7)
    with pytest.raises(ValueError, match="letters, digits"):
        db.tag("../escape", 3)
    with pytest.raises(ValueError, match="not both"):
        db.get(version=3, tag="latest")


def test_collection_keeps_tagged_versions_and_the_newest_n(tmp_path):
    db = ParameterDB(tmp_path / "p")
    for v in range(10):
        db.put(v, weights(v))
    db.tag(snapshot_tag(2), 2)
    db.tag("best", 4)
    stale = db.root / ".v000000099.npz.123.deadbeef.tmp"  # a writer that died mid-write
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - STALE_TEMPORARY_SECONDS - 1,) * 2)
    fresh = db.root / ".v000000100.npz.124.cafecafe.tmp"  # a writer still writing
    fresh.write_bytes(b"half")
    assert db.collect(keep_newest=3) == [0, 1, 3, 5, 6]
    assert db.versions() == [2, 4, 7, 8, 9]
    assert not stale.exists() and fresh.exists()
    db.untag("best")
    assert db.collect(keep_newest=0) == [4, 7, 8, 9]
    assert db.versions() == [2]


def test_a_resumed_store_is_the_one_its_checkpoint_indexed(tmp_path):
    db = ParameterDB(tmp_path / "p")
    for v in (10, 20):
        db.put(v, weights(v))
    db.tag("latest", 20)
    db.tag(snapshot_tag(10), 10)
    index = db.index()  # what the checkpoint at version 20 keeps
    assert index == {"versions": [10, 20], "tags": {"latest": {"version": 20}, "snapshot-10": {"version": 10}}}
    for v in (30, 40):  # the attempt goes on past its last checkpoint, then dies
        db.put(v, weights(v))
        db.tag(snapshot_tag(v), v)
    db.tag("latest", 40)
    db.tag("best", 30, mean_return=1.0)
    db.untag(snapshot_tag(10))
    db.write_ratings({"anchor": "random", "games": [[10, "random", 3, 4], [30, 10, 2, 4], [20, 10, 1, 4]]})
    ParameterDB(tmp_path / "p").restore(index)  # the next attempt trains versions 21.. again
    assert db.versions() == [10, 20]
    assert db.tags() == index["tags"]
    assert db.ratings()["games"] == [[10, "random", 3, 4], [20, 10, 1, 4]]  # version 30's games are gone with it


def _write_versions(root, count: int, keep: int) -> None:
    db = ParameterDB(root)
    for v in range(count):
        db.put(v, weights(v))
        db.tag("latest", v)
        db.collect(keep_newest=keep)


def _read_latest(root, last: int, until: float, results) -> None:
    db, seen, reads = ParameterDB(root), set(), 0
    while time.time() < until and last not in seen:
        try:
            version, arrays = db.get(tag="latest")
        except VersionNotFound as e:
            if "no tag" in str(e):  # before the writer's first tag
                continue
            raise
        assert all(np.all(a == version) for a in arrays.values()), f"version {version} read torn"
        seen.add(version)
        reads += 1
    results.put((reads, len(seen)))


def test_concurrent_readers_never_see_a_partly_written_or_collected_version(tmp_path):
    """A writer stores versions and moves `latest` as fast as it can, collecting all but the newest one each
    time, while two reader processes read `latest` until they see the last: every read is one whole version."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    until = time.time() + 60  # a bound: the readers stop when they have read the last version
    readers = [ctx.Process(target=_read_latest, args=(tmp_path, 199, until, results)) for _ in range(2)]
    for r in readers:
        r.start()
    writer = ctx.Process(target=_write_versions, args=(tmp_path, 200, 1))
    writer.start()
    writer.join(120)
    for r in readers:
        r.join(120)
    assert writer.exitcode == 0 and all(r.exitcode == 0 for r in readers)  # (an assertion in a reader: exit 1)
    counts = [results.get(timeout=10) for _ in readers]
    assert all(reads >= 10 and distinct >= 2 for reads, distinct in counts), counts
    assert ParameterDB(tmp_path).versions() == [199]


def test_srl_launch_params_lists_tags_and_untags(tmp_path, capsys):
    from launcher import cli

    run = tmp_path / "run"
    db = ParameterDB(run / "parameters" / "default")
    for v in (4, 8):
        db.put(v, weights(v))
    db.tag("latest", 8)
    assert cli.main(["params", str(run), "--tag", "keep=4"]) == 0
    out = capsys.readouterr().out
    assert "2 versions stored" in out and out.splitlines()[1].split() == ["4", "keep"]
    assert out.splitlines()[2].split() == ["8", "latest"]
    assert cli.main(["params", str(run), "--untag", "keep"]) == 0 and db.tags() == {"latest": {"version": 8}}
    assert cli.main(["params", str(run), "--tag", "keep=5"]) == 2
    assert "no version 5 to tag 'keep'" in capsys.readouterr().err
    assert cli.main(["params", str(run), "--tag", "keep"]) == 2
    assert "expected NAME=VERSION" in capsys.readouterr().err
    assert cli.main(["params", str(run), "--policy", "prey"]) == 2
    assert "no parameter database (policies stored: default)" in capsys.readouterr().err


def test_enjoy_names_a_version_the_database_does_not_hold(tmp_path, capsys):
    from launcher import cli

    run = tmp_path / "run"
    run.mkdir()
    (run / "experiment.yaml").write_text("name: x\nenv: {id: CartPole-v1}\nstop: {wall_time: 10}\n")
    ParameterDB(run / "parameters" / "default").put(2, weights(2))
    assert cli.main(["enjoy", str(run), "--version", "3"]) == 2
    assert "no version 3 (stored: 1 versions, 2..2)" in capsys.readouterr().err
    assert cli.main(["enjoy", str(run), "--tag", "best"]) == 2
    assert "no tag 'best' (tags: none)" in capsys.readouterr().err
