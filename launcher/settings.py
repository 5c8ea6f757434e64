"""Profiles: parts of an experiment kept in files of their own and composed under it, such as a cluster's
`slurm:` keys (partitions, network, MPI, account, container...) shared by every experiment run there
(srl_hpc.config.loader.loads says the order). Named by --profile (repeatable) or $SRL_PROFILE."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from srl_hpc.config import ConfigError


def add_profile_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a profile: experiment keys the experiment's own keys win over, e.g. a cluster's slurm: "
        "section (repeatable, a later file wins; default: $SRL_PROFILE, files separated by ':')",
    )


def profile_files(given: Sequence[str | Path] = ()) -> list[Path]:
    """The files given (--profile), else those of $SRL_PROFILE; a missing one is named with where it was given,
    the flag or the variable, since it has no line in any file."""
    source = "--profile" if given else "$SRL_PROFILE"
    files = [Path(f) for f in given] or [Path(f) for f in os.environ.get("SRL_PROFILE", "").split(os.pathsep) if f]
    missing: list[tuple[str, int | None, str]] = [(str(f), None, "no such file") for f in files if not f.is_file()]
    if missing:
        raise ConfigError(source, missing)
    return files
