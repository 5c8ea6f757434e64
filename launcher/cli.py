# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this line)
"""`srl-launch`: run an experiment locally or on Slurm, validate it, follow or stop a run. This module parses
the first word and dispatches to the subcommand's module (launcher/commands/, and launcher/doctor.py)."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from argcomplete.completers import DirectoriesCompleter, FilesCompleter

from launcher import doctor, local, plan, slurm
from launcher.commands import cancel, common, enjoy, graph, logs, params, prepare, resume, run, status, tune, validate
from srl_hpc import __version__, config
from srl_hpc.completion import complete

EXITS = """\
exit codes: 0 done (status: the run succeeded, or is pending or running); 1 the run failed, was cancelled or
timed out; 2 what was asked cannot be done as written (a usage error, an invalid experiment or one too big for
this machine, a file or run directory missing or already there); 3 Slurm refused or did not answer; 128+N a local
run stopped by signal N"""


# each command's parser (for --help and shell completion: _parser) and its main(argv) -> exit code
MODULES = {
    "run": run,
    "prepare": prepare,
    "validate": validate,
    "graph": graph,
    "status": status,
    "logs": logs,
    "cancel": cancel,
    "resume": resume,
    "enjoy": enjoy,
    "params": params,
    "doctor": doctor,
    "tune": tune,
}
PARSERS = {name: module.parser for name, module in MODULES.items()}
COMMANDS = {name: module.main for name, module in MODULES.items() if name != "run"}  # (run: the default)


# 0 ok, 1 the run failed (returned by the commands), 2 what was asked cannot be done as written, 3 the scheduler
# refused or did not answer, 128+N a signal (launcher.local); docs/local-mode.md lists them
EXIT_CODES: dict[type[Exception], int] = {
    common.UsageError: 2,
    config.ConfigError: 2,
    plan.PlanError: 2,
    local.TooBigForThisMachine: 2,
    FileNotFoundError: 2,
    FileExistsError: 2,
    PermissionError: 2,
    slurm.SlurmError: 3,
}


def _parser() -> argparse.ArgumentParser:
    """Every command's parser under one, for --help and shell completion. The commands parse their own arguments
    (main): `srl-launch EXPERIMENT.yaml` means `run`, which a parser's subcommands cannot say."""
    top = argparse.ArgumentParser(
        prog="srl-launch",
        usage=common.USAGE,
        epilog=EXITS,
        description="Run, check and follow srl-hpc experiments, locally or on Slurm.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="store_true", help="print the installed version")
    commands = top.add_subparsers(metavar="COMMAND", help=", ".join(PARSERS))
    # the first word may be an experiment file: `run` it
    commands.completer = _COMPLETERS["experiment"]  # type: ignore[attr-defined]
    for name, build in PARSERS.items():
        own = build()
        for action in own._actions:
            action.completer = _COMPLETERS.get(action.dest)  # None: argcomplete's default, any file
        commands.add_parser(name, parents=[own], add_help=False, description=own.description)
    return top


# what a word completes to, by the argument it is for (the rest: any file)
_COMPLETERS = {
    "experiment": FilesCompleter(("yaml", "yml")),
    "experiments": FilesCompleter(("yaml", "yml")),
    "profile": FilesCompleter(("yaml", "yml")),
    "run_dir": DirectoriesCompleter(),
}


def main(argv=None) -> int:
    complete(_parser, PARSERS, default="run")  # the shell's completion hook: answers and exits
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a usage error: what to type, on stderr
        print(_parser().format_help(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(_parser().format_help())
        return 0
    if argv[0] == "--version":
        print(f"srl-launch {__version__}")
        return 0
    try:
        if argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        if argv[0] == "run":
            return run.main(argv[1:])
        _refuse_unknown_command(argv[0])
        return run.main(argv)
    except tuple(EXIT_CODES) as e:
        print(f"srl-launch: {e}", file=sys.stderr)
        return next(code for kind, code in EXIT_CODES.items() if isinstance(e, kind))


def _refuse_unknown_command(word: str) -> None:
    """A first word that is neither a command nor a file that exists, but close to a command (`valdate`), is a
    typo: say so, instead of reading it as an experiment file that is not there."""
    if Path(word).exists() or word.startswith("-") or word.endswith((".yaml", ".yml")):
        return
    close = difflib.get_close_matches(word, [*COMMANDS, "run"], n=1, cutoff=0.6)
    if close:
        raise common.UsageError(f"unknown command {word!r}; did you mean {close[0]!r}? (srl-launch --help lists them)")


if __name__ == "__main__":
    sys.exit(main())
