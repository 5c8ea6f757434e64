"""Shell completion (bash, zsh) of srl-launch and srl-trace through argcomplete: the shell's hook runs the command
with _ARGCOMPLETE set, and argcomplete answers from an argparse parser. Both commands let their first word be left
out (`srl-launch EXP.yaml` is `run`, `srl-trace RUN` is `summary`), which a parser's subcommands cannot express:
such a line is completed as if that word were there."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

import argcomplete


def complete(build: Callable, commands: Collection[str], default: str) -> None:
    """Under the shell's completion hook: print the candidates for the line from the parser build() makes, and exit.
    Otherwise return at once (the parser is not even built)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    skip = int(os.environ["_ARGCOMPLETE"])  # the words naming the program: 1, or 2 for `python script`
    line, point = os.environ.get("COMP_LINE", ""), int(os.environ.get("COMP_POINT", 0))
    typed = line[:point]
    words = typed.split()
    first_done = len(words) > skip + 1 or (len(words) == skip + 1 and typed[-1:].isspace())
    if first_done and words[skip] not in commands and not words[skip].startswith("-"):
        at = 0
        for word in words[: skip + 1]:
            at = typed.index(word, at) + len(word)
        at -= len(words[skip])
        os.environ["COMP_LINE"] = f"{line[:at]}{default} {line[at:]}"
        os.environ["COMP_POINT"] = str(point + len(default) + 1)
    argcomplete.autocomplete(build())
