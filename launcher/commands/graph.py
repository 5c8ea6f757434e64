"""`srl-launch graph EXPERIMENT.yaml...`: the workers, their handlers, het groups and streams."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.commands import common
from srl_hpc import graph as wiring


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch graph", description="Print an experiment's workers, task handlers, het groups and streams."
    )
    p.add_argument("experiments", type=Path, nargs="+", metavar="experiment")
    common.add_overrides(p)
    return p


def main(argv) -> int:
    args = common.parse(parser(), argv, many=True)
    for i, path in enumerate(args.experiments):
        header = f"# {path}\n" if len(args.experiments) > 1 else ""
        exp = common.experiment(argparse.Namespace(**vars(args), experiment=path))
        print(("\n" if i else "") + header + wiring.describe(wiring.build(exp)))
    return 0
