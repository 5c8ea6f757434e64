"""A cluster's settings, kept in one file and shared by every experiment run there: its `slurm:` section
(partitions, network, MPI, account, container...) is the base that an experiment's own `slurm:` keys
override (srl_hpc.config.loader.cluster_settings). Named by --cluster or $SRL_CLUSTER."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_cluster_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", type=Path, metavar="FILE", help="a cluster settings file: its slurm: section is the "
                   "base the experiment's own slurm: keys override (default: $SRL_CLUSTER, if set)")


def cluster_file(args) -> Path | None:
    """--cluster, else $SRL_CLUSTER, else none."""
    chosen = getattr(args, "cluster", None) or os.environ.get("SRL_CLUSTER")
    return Path(chosen) if chosen else None
