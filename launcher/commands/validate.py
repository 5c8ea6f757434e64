"""`srl-launch validate EXPERIMENT.yaml...`: check files and the algorithm against the env's spaces."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.commands import common


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch validate",
        description="Check an experiment file, and its algorithm against the env's spaces "
        "(built once here); run nothing.",
    )
    p.add_argument("experiments", type=Path, nargs="+", metavar="experiment")
    common.add_overrides(p)
    return p


def main(argv) -> int:
    args = common.parse(parser(), argv, many=True)
    for path in args.experiments:
        common.checked_experiment(argparse.Namespace(**vars(args), experiment=path))
        print(f"{path}: ok")
    return 0
