"""`srl-launch params RUN`: a run's parameter database, its versions and tags; tag or untag a version."""

from __future__ import annotations

import argparse

from launcher.commands import common
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch params",
        description="A run's parameter database: the versions "
        "of each policy stored in RUN/parameters/ and their tags; tag or untag a version.",
    )
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--policy", default="", help="the policy (a run with `policies`); default: the run's one policy")
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="NAME=VERSION",
        help="tag a stored version (a tagged version is never garbage-collected); repeatable",
    )
    p.add_argument("--untag", action="append", default=[], metavar="NAME", help="remove a tag; repeatable")
    return p


def main(argv) -> int:
    from srl_hpc.services.parameter_db import ParameterDB

    args = parser().parse_args(argv)
    root = args.run_dir.parameters_of(args.policy)
    if not root.is_dir():
        stored = sorted(p.name for p in (args.run_dir.root / "parameters").glob("*"))
        raise FileNotFoundError(
            f"{root}: no parameter database" + (f" (policies stored: {', '.join(stored)})" if stored else "")
        )
    db = ParameterDB(root)
    for word in args.tag:
        name, sep, version = word.partition("=")
        if not sep or not version.strip().isdigit():
            raise common.UsageError(f"--tag {word!r}: expected NAME=VERSION, e.g. --tag keep=120")
        try:
            db.tag(name, int(version))
        except ValueError as e:
            raise common.UsageError(str(e)) from None
    for name in args.untag:
        db.untag(name)
    tags_of: dict[int, list[str]] = {}
    for name, record in db.tags().items():
        tags_of.setdefault(record["version"], []).append(name)
    versions = db.versions()
    rated = {player: elo for player, elo in db.ratings().get("elo", [])}  # self-play: the rating workers' Elo
    print(
        f"{root}: {len(versions)} versions stored"
        + ("; Elo (random player 0) from the rating workers" if rated else "")
    )
    for v in versions:
        elo = f"{rated[v]:>7.0f}  " if v in rated else " " * 9 if rated else ""
        print(f"  {v:>9}  {elo}{' '.join(tags_of.get(v, []))}")
    fixed = [f"{player} {elo:.0f}" for player, elo in rated.items() if isinstance(player, str)]
    if fixed:
        print(f"  fixed players: {', '.join(fixed)}")
    return 0
