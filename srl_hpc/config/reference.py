"""The configuration reference (docs/reference.md), generated from the schema so that it cannot drift from it.

    python -m srl_hpc.config.reference > docs/reference.md

Every key of an experiment file, walked from `Experiment` through the frozen dataclasses of
srl_hpc/config/ (schema.py and the sections with modules of their own): its dotted path, type, default,
allowed values (a `Literal` type's) and the schema's own comment for the field (on the field's line, or on
the comment lines right above it); a class docstring introduces its section. `algorithm` gets one table per
algorithm (chosen by `name`), and a section type that several fields of one parent share (slurm's het
groups) is one table, `slurm.<group>`.
tests/test_reference.py fails when docs/reference.md is not what render() returns.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from typing import Any, Literal, Union, cast

from srl_hpc.config.schema import Experiment

COMMAND = "python -m srl_hpc.config.reference > docs/reference.md"
GROUP = "<group>"  # the path segment of a section type that several fields of one parent share


@dataclasses.dataclass
class Section:
    path: str  # "workers.actor", "" for the top level, "slurm.<group>"
    cls: type
    title: str  # the heading's text (Markdown)
    groups: tuple[str, ...] = ()  # the fields a <group> section stands for


def render() -> str:
    """docs/reference.md: every key of an experiment file, one table per section."""
    sections = _sections(Experiment, "", "Top level")
    out = [
        "# Configuration reference",
        "",
        f"Generated from the schema (`srl_hpc/config/`) by `{COMMAND}`; do not edit by hand "
        "(`tests/test_reference.py` fails when this page is stale).",
        "",
        "Every key of an experiment file (`srl-launch EXP.yaml`), by its dotted path: write it nested in the "
        "YAML file, or as `--set workers.actor.ring_size=16` on the command line. A section (a mapping) "
        "left out takes the defaults of its keys; `null` leaves an optional section out. Types: `str`, "
        "`int`, `float`, `bool`, a list, a mapping; where a key takes one of a few values, they are listed.",
        "",
        "Sections: " + ", ".join(f"[{s.title}](#{_slug(s.title)})" for s in sections) + ".",
        "",
    ]
    for section in sections:
        out += _render_section(section)
    return "\n".join(out).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------- the walk


def _sections(cls: type, path: str, title: str, groups: tuple[str, ...] = ()) -> list[Section]:
    """This section, then the sections of its fields, depth first in field order."""
    found = [Section(path, cls, title, groups)]
    shared = _shared_types(cls)
    seen: set[type] = set()
    for f in dataclasses.fields(cls):
        subs = _dataclasses_in(_hints(cls)[f.name])
        if not subs:
            continue
        if len(subs) > 1:  # a union (algorithm): one table per member, by its name
            for sub in subs:
                found += _sections(sub, _join(path, f.name), _title(_join(path, f.name), _variant_name(sub)))
        elif subs[0] in shared:
            if subs[0] not in seen:
                seen.add(subs[0])
                group_path = _join(path, GROUP)
                found += _sections(subs[0], group_path, _title(group_path), shared[subs[0]])
        else:
            found += _sections(subs[0], _join(path, f.name), _title(_join(path, f.name)))
    return found


def _shared_types(cls: type) -> dict[type, tuple[str, ...]]:
    """Section types that several fields of cls have (slurm's het groups): type -> those fields."""
    by_type: dict[type, list[str]] = {}
    for f in dataclasses.fields(cls):
        subs = _dataclasses_in(_hints(cls)[f.name])
        if len(subs) == 1:
            by_type.setdefault(subs[0], []).append(f.name)
    return {t: tuple(names) for t, names in by_type.items() if len(names) > 1}


def _title(path: str, variant: str | None = None) -> str:
    return f"`{path}`: {variant}" if variant else f"`{path}`"


def _dataclasses_in(tp) -> list[type]:
    if dataclasses.is_dataclass(tp):
        return [cast(type, tp)]
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [cast(type, a) for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
    return []


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _variant_name(cls: type) -> str:
    return typing.get_args(_hints(cls)["name"])[0]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---------------------------------------------------------------------------------------- the tables


def _render_section(section: Section) -> list[str]:
    cls = section.cls
    out = [f"## {section.title}", ""]
    intro = _docstring(cls)
    if section.groups:
        intro = (
            (intro + " " if intro else "") + f"`{GROUP}` is one of " + ", ".join(f"`{g}`" for g in section.groups) + "."
        )
    if intro:
        out += [_escape(intro), ""]
    out += ["| key | type | default | allowed values | description |", "|---|---|---|---|---|"]
    shared = _shared_types(cls)
    for f in dataclasses.fields(cls):
        tp = _hints(cls)[f.name]
        subs = _dataclasses_in(tp)
        if subs and subs[0] in shared:
            link = f"[{subs[0].__name__}](#{_slug(_title(_join(section.path, GROUP)))})"
        elif len(subs) > 1:
            link = ", ".join(
                f"[{_variant_name(s)}](#{_slug(_title(_join(section.path, f.name), _variant_name(s)))})" for s in subs
            )
            link = f"one of {link}, by `{_join(section.path, f.name)}.name`"
        elif subs:
            link = f"[{subs[0].__name__}](#{_slug(_title(_join(section.path, f.name)))})"
        else:
            link = None
        cells = [
            f"`{_join(section.path, f.name)}`",
            _type_name(tp, link),
            _default(f, subs),
            _allowed(tp),
            _escape(field_docs(cls).get(f.name, "")),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _type_name(tp, link: str | None = None) -> str:
    """A type in YAML words: int, list of str, mapping, a section (link), 'or null' for Optional."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return f"{_type_name(rest[0], link)} or null" if type(None) in args else _type_name(rest[0], link)
        return link or " or ".join(_type_name(a) for a in rest)
    if dataclasses.is_dataclass(tp):
        return f"section {link}" if link else f"section {cast(type, tp).__name__}"
    if origin is Literal:
        return " or ".join(sorted({type(a).__name__ for a in args}))
    if origin in (tuple, list):
        return f"list of {_type_name(args[0])}" if args else "list"
    if tp is dict or origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}" if args else "mapping"
    return getattr(tp, "__name__", str(tp))


def _allowed(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        literals = [a for a in args if typing.get_origin(a) is Literal]
        if len([a for a in args if a is not type(None)]) > 1 and all(dataclasses.is_dataclass(a) for a in args):
            names = ", ".join(f"`{_value(_variant_name(a))}`" for a in args)
            return f'{names} (by `name`), or a user\'s `"package.module:Config"`'
        return _allowed(literals[0]) if literals else ""
    if origin is Literal:
        return ", ".join(f"`{_value(a)}`" for a in args)
    return ""


def _default(f: dataclasses.Field, subs: list[type]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        changed = {
            k.name: getattr(value, k.name)
            for k in dataclasses.fields(value)
            if k.default is not dataclasses.MISSING and getattr(value, k.name) != k.default
        }
        if len(subs) > 1:  # a union: which member by its name
            changed = {"name": cast(Any, value).name, **changed}
        return f"`{_value(changed)}`" if changed else "the section's defaults"
    return f"`{_value(value)}`"


def _value(v) -> str:
    """A value as YAML writes it in flow style (strings quoted: 01:00:00 unquoted is a number in YAML 1.1)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _slug(title: str) -> str:
    """The anchor Python-Markdown's toc (MkDocs) gives a heading: its text less code marks and punctuation."""
    text = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


_CODE = re.compile(r"(`[^`]*`)")


def _escape(text: str) -> str:
    """Schema prose as one Markdown table cell: Markdown's own characters escaped outside `code` spans."""
    parts = _CODE.split(" ".join(text.split()))
    for i, part in enumerate(parts):  # the odd parts are code spans, where only a table's | needs escaping
        if i % 2:
            parts[i] = part.replace("|", "\\|")
        else:
            parts[i] = re.sub(r"([\\*_\[\]|])", r"\\\1", part).replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts)


# ------------------------------------------------------------------------------------ the schema's prose


def _docstring(cls: type) -> str:
    """The class's own docstring (not the signature dataclasses makes up when it has none), as one paragraph."""
    node = cast(ast.ClassDef, ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0])
    doc = ast.get_docstring(node) or ""
    return " ".join(doc.split())


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """field name -> the comment that documents it in the schema, joined into one line: the comment lines
    right above the field, then the comment on its own line(s). Inherited fields: the defining class's."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass is not object:
            docs.update(_own_field_docs(klass))
    return {f.name: docs.get(f.name, "") for f in dataclasses.fields(cls)}


def _own_field_docs(cls: type) -> dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments: dict[int, str] = {}  # line number (1-based) -> comment text
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    docs: dict[str, str] = {}
    for node in cast(ast.ClassDef, ast.parse(source).body[0]).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        assert node.end_lineno is not None  # (ast.parse sets it)
        trailing = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        docs[node.target.id] = " ".join(above + trailing)
    return docs


def undocumented() -> list[str]:
    """Dotted paths of the keys whose field has no comment in the schema."""
    missing = []
    for section in _sections(Experiment, "", "Top level"):
        docs = field_docs(section.cls)
        missing += [
            _join(section.path, f.name)
            + ("" if not _is_union_member(section) else f" ({section.title.split(': ')[-1]})")
            for f in dataclasses.fields(section.cls)
            if not docs[f.name]
        ]
    return missing


def _is_union_member(section: Section) -> bool:
    return ": " in section.title


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--undocumented"]:
        missing = undocumented()
        if missing:  # nothing at all when every field has its doc
            print("\n".join(missing))
    else:
        sys.stdout.write(render())
