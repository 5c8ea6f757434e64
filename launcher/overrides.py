"""Bare KEY=VALUE words: `srl-launch validate exp.yaml workers.actor.count=3` means `--set workers.actor.count=3`,
as overrides are written in other launchers' command lines. A word is an override when it reads KEY.PATH=VALUE and
is not a file that exists; every other positional word stays what it was (an experiment file, or an error)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_ASSIGNMENT = re.compile(r"[A-Za-z_][\w.]*=")


def add(p: argparse.ArgumentParser) -> None:
    """The trailing KEY=VALUE words; parse with p.parse_intermixed_args, so that they may follow options."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="the same as --set KEY=VALUE")


def take(args: argparse.Namespace, words: list) -> list[Path]:
    """Move the KEY=VALUE words among the positional `words` to args.set (after the --set ones); return the rest."""
    words = [str(w) for w in words]
    bare = [w for w in words if _ASSIGNMENT.match(w) and not Path(w).exists()]
    args.set = [*args.set, *bare]
    return [Path(w) for w in words if w not in bare]
