"""docs/reference.md, the configuration reference, is generated from the schema: it lists every key, and it
is what the generator writes today (a schema change without regenerating the page fails here)."""

import dataclasses
import re
import types
import typing

from conftest import ROOT
from srl_hpc.config import reference
from srl_hpc.config.schema import Experiment

PAGE = ROOT / "docs" / "reference.md"


def schema_keys() -> set[str]:
    """The dotted path of every field of every dataclass reachable from Experiment, walked here on its own
    (not with the generator's walk): a union's members share their field's path (algorithm.gamma), and a
    section type that several fields of one parent have is documented once, under <group> (slurm.<group>)."""
    keys: set[str] = set()

    def members(tp):
        if dataclasses.is_dataclass(tp):
            return [tp]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            return [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return []

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        single = [m[0] for f in dataclasses.fields(cls) if len(m := members(hints[f.name])) == 1]
        for f in dataclasses.fields(cls):
            keys.add(prefix + f.name)
            subs = members(hints[f.name])
            for sub in subs:
                shared = len(subs) == 1 and single.count(sub) > 1
                walk(sub, prefix + ("<group>" if shared else f.name) + ".")

    walk(Experiment, "")
    return keys


def page_rows(text: str) -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))


def test_every_schema_key_has_a_row_in_the_reference():
    keys = schema_keys()
    assert {
        "workers.actor.ring_size",
        "algorithm.burn_in",
        "slurm.<group>.partition",
        "slurm.actor",
        "monitor.wandb.mode",
    } <= keys  # the walk reaches nested, union, shared and optional sections
    missing = sorted(keys - page_rows(PAGE.read_text()))
    assert not missing, (
        f"keys of the schema without a row in docs/reference.md: {missing}; regenerate it: {reference.COMMAND}"
    )


def test_the_reference_page_is_what_the_generator_writes():
    assert PAGE.read_text() == reference.render(), (
        f"docs/reference.md is stale (the schema changed since it was generated); regenerate it: {reference.COMMAND}"
    )


def test_rows_carry_the_schemas_comments_types_defaults_and_choices():
    rows = {
        m[0]: m[1:]
        for m in re.findall(
            r"^\| `([^`]+)` \| (.*?) \| (.*?) \| (.*?) \| (.*?) \|$", reference.render(), flags=re.MULTILINE
        )
    }
    assert rows["workers.actor.ring_size"] == ("int", "`8`", "", "environments per actor worker, stepped round-robin")
    assert rows["workers.trainer.precision"][2] == '`"fp32"`, `"bf16"`'
    assert rows["slurm.actor"][1] == "`{tasks_per_node: 8}`"
    assert rows["slurm.container.image"][1] == "required"
    assert rows["run_dir"][0] == "str or null"
    # a comment block right above the field, joined into one line, with Markdown's characters escaped
    assert rows["env.id"][3].startswith("any gymnasium id (srl\\_hpc registers its own under")
    assert "&lt;name&gt;" in rows["run_dir"][3]


def test_a_field_without_a_comment_gets_an_empty_cell_and_is_listed(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Documented:
        """A section."""

        # above, first line
        # above, second line
        a: int = 1
        b: str = "x"  # trailing
        c: bool = False
        d: str = "a # b"  # after a string with a hash

    docs = reference.field_docs(Documented)
    assert docs == {
        "a": "above, first line above, second line",
        "b": "trailing",
        "c": "",
        "d": "after a string with a hash",
    }
    # every field of the schema has a doc now: listed, as if none had, are all of them (algorithm's per member)
    monkeypatch.setattr(reference, "field_docs", lambda cls: {f.name: "" for f in dataclasses.fields(cls)})
    listed = set(reference.undocumented())
    assert {"seed", "workers.actor.count", "algorithm.gamma (ppo)", "slurm.<group>.qos"} <= listed


def test_every_key_of_the_schema_has_a_doc():
    """Every field carries its one-line doc in the schema (a comment on or above it): the reference has no
    empty description cell."""
    missing = reference.undocumented()
    assert not missing, f"schema fields without a doc comment in srl_hpc/config/: {missing}"
