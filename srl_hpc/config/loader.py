"""YAML -> a validated Experiment. Every problem of a file is collected and reported together, each naming
its key path and YAML line, before any process starts. Unknown keys are errors."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import yaml

from srl_hpc.algorithm_spec import SPECS, AlgorithmSpec
from srl_hpc.config.schema import Experiment
from srl_hpc.dotted import load_object

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Section = TypeVar("Section", bound="DataclassInstance")


class ConfigError(ValueError):
    """All problems of one experiment file; str() lists one per line as 'FILE:LINE: key.path: message', FILE
    being a profile's where the key came from one. A flag or variable ("--set", "$SRL_PROFILE") has no lines."""

    def __init__(self, source: str, problems: list[tuple[str, int | None, str]]) -> None:
        self.source = source
        self.problems = sorted(
            problems, key=lambda p: (p[1] is None, _file(p[1], source) != source, _file(p[1], source), p[1] or 0)
        )

        def where(line: int | None) -> str:
            if line is None and source.startswith(("--", "$")):
                return source
            return f"{_file(line, source)}:{line if line else '?'}"

        lines = [f"{where(line)}: {path or '<top>'}: {msg}" for path, line, msg in self.problems]
        super().__init__(f"{len(problems)} problem(s) in {source}:\n" + "\n".join(lines))


class Line(int):
    """A line number that knows its file: a composed experiment's keys come from several files."""

    file: str

    def __new__(cls, number: int, file: str) -> Line:
        line = super().__new__(cls, number)
        line.file = file
        return line


def _file(line, source: str) -> str:
    return getattr(line, "file", source)


def load(path: str | Path, profiles: Sequence[str | Path] = ()) -> Experiment:
    """Read and validate an experiment file; raises ConfigError listing every problem. `profiles`: files of
    experiment keys composed under the file's own (after those its `defaults:` names; see loads)."""
    return loads(_read(path), source=str(path), profiles=profiles)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ConfigError(str(path), [("", None, f"cannot read: {e.strerror}")]) from None


def _compose(text: str, source: str) -> tuple[dict, dict[str, int], list]:
    """A YAML mapping as plain data, the line of each key path, and its problems so far."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = ("", mark.line + 1 if mark else None, f"invalid YAML: {getattr(e, 'problem', e)}")
        raise ConfigError(source, [problem]) from None
    if node is None or not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node else None
        raise ConfigError(source, [("", line, "the file must be a mapping of sections")])
    problems: list[tuple[str, int, str]] = []
    lines: dict[str, int] = {}
    value = _to_python(node, "", lines, problems)
    return (
        value,
        {key: Line(line, source) for key, line in lines.items()},
        [(key, Line(line, source), msg) for key, line, msg in problems],
    )


def loads(text: str, source: str = "<string>", profiles: Sequence[str | Path] = ()) -> Experiment:
    """Validate an experiment composed of, in order: the profiles its `defaults:` list names (paths relative
    to `source`), then `profiles`, then its own keys; a later layer's keys win (see _merged)."""
    problems: list[tuple[str, int | None, str]] = []
    value, lines = _composed(source, text, profiles, problems)
    if "name" not in value and source.endswith((".yaml", ".yml")):
        value["name"] = Path(source).stem
    exp = _build(Experiment, value, "", lines, problems)
    if exp is not None:  # value checks too, so one run reports type and value problems together
        _collect_checks(exp, "", lines, problems)
    if problems:
        raise ConfigError(source, problems)
    assert exp is not None  # (a section that cannot be built has its problems)
    return exp


Layer = tuple[dict, dict]  # a file's plain data, and the Line of each key path


def _composed(source: str | Path, text: str, profiles: Sequence[str | Path], problems: list) -> Layer:
    """The experiment's layers in order (its defaults, the profiles, its own keys), composed."""
    base, own = _layers(Path(source), text, (Path(source),), problems)
    for profile in profiles:
        base = _on(base, _on(*_layers(Path(profile), _read(profile), (Path(profile),), problems)))
    return _on(base, own)


def _layers(path: Path, text: str, chain: tuple[Path, ...], problems: list) -> tuple[Layer, Layer]:
    """(the base composed of the profiles a file's `defaults:` names, each with its own defaults; the file's
    own keys). `defaults` is a directive, so it is in neither: a resolved experiment has no such key."""
    value, lines, found = _compose(text, str(path))
    problems += found
    entries = value.pop("defaults", [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError(
            str(path),
            problems
            + [("defaults", lines["defaults"], "must be a list of profile files (paths relative to this file)")],
        )
    base: Layer = ({}, {})
    for i, entry in enumerate(entries):
        key, profile = f"defaults[{i}]", path.parent / Path(entry).expanduser()
        if profile.resolve() in {p.resolve() for p in chain}:
            cycle = " -> ".join(str(p) for p in (*chain, profile))
            raise ConfigError(str(path), problems + [(key, lines[key], f"a cycle of defaults: {cycle}")])
        if not profile.is_file():
            raise ConfigError(str(path), problems + [(key, lines[key], f"no such file: {profile}")])
        base = _on(base, _on(*_layers(profile, _read(profile), (*chain, profile), problems)))
    own = {key: line for key, line in lines.items() if key != "defaults" and not key.startswith("defaults[")}
    return base, (value, own)


def _on(base: Layer, over: Layer) -> Layer:
    """`over` composed on `base`: merged data, and each key's line from the file that set it last."""
    return _merged(base[0], over[0]), {**base[1], **over[1]}


def _merged(base: dict, over: dict) -> dict:
    """`over` on top of `base`: mappings merge key by key, `over`'s values win; lists and scalars replace."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def key_lines(path: str | Path, profiles: Sequence[str | Path] = ()) -> dict[str, int]:
    """The YAML line of every key path of an experiment file ("env.id" -> 7, "algorithm" -> 9; a key from a
    profile, its `defaults:` or `profiles`, that profile's Line), for checks made after loading
    (srl_hpc/config/spaces_check.py); {} where a file cannot be read or parsed."""
    try:
        return _composed(path, Path(path).read_text(), profiles, [])[1]
    except (OSError, ConfigError):
        return {}


def to_dict(exp: Experiment) -> dict:
    """Plain data (lists, dicts, scalars) for writing the resolved config back as YAML."""

    def plain(v: object) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(exp)


def dump(exp: Experiment) -> str:
    return yaml.safe_dump(to_dict(exp), sort_keys=False)


def replace(exp: Experiment, **changes) -> Experiment:
    """A copy with top-level fields changed, validated again (e.g. seed or run_dir of one sweep member)."""
    new = dataclasses.replace(exp, **changes)
    problems: list = []
    _collect_checks(new, "", {}, problems)
    if problems:
        raise ConfigError("<replace>", problems)
    return new


def with_overrides(exp: Experiment, assignments: list[str]) -> Experiment:
    """Apply 'key.path=value' assignments (value in YAML syntax), e.g. 'workers.actor.ring_size=16'.
    'algorithm.name=OTHER' switches to that algorithm's defaults (the old one's settings would be unknown
    keys), and to buffer workers if it trains from a replay and the run had none (or to none for an
    on-policy one) unless an assignment sets `workers.buffer.count`; assignments after it set its keys."""
    data = to_dict(exp)
    switched_to = None
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise ConfigError("--set", [(assignment, None, "expected KEY.PATH=VALUE")])
        node, parts = data, key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError("--set", [(key, None, f"{part!r} is not a section")])
        value = yaml.safe_load(raw)
        if parts == ["algorithm", "name"] and value != node.get("name"):
            node.clear()
            switched_to = value
        node[parts[-1]] = value
    if switched_to is not None and not any(a.startswith("workers.buffer.count=") for a in assignments):
        _buffers_for(switched_to, data.setdefault("workers", {}).setdefault("buffer", {}))
    try:
        return loads(yaml.safe_dump(data, sort_keys=False), source="--set")
    except ConfigError as e:  # lines of the regenerated YAML would mislead: the key path says it all
        raise ConfigError("--set", [(path, None, msg) for path, _, msg in e.problems]) from None


def _buffers_for(algorithm: str, buffer: dict) -> None:
    """One buffer worker for an algorithm that learns from a replay where there was none; none for an
    on-policy one. An unknown name is left for validation to name."""
    try:
        replay = (load_object(algorithm).spec if ":" in algorithm else SPECS[algorithm]).replay
    except (KeyError, ImportError, AttributeError, ValueError):
        return
    if replay and not buffer.get("count"):
        buffer["count"] = 1
    elif not replay:
        buffer["count"] = 0


def _to_python(node: yaml.Node, path: str, lines: dict[str, int], problems: list[tuple[str, int, str]]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = key_node.value
            sub = f"{path}.{key}" if path else str(key)
            if key in out:
                problems.append((sub, key_node.start_mark.line + 1, "duplicate key"))
            out[key] = _to_python(value_node, sub, lines, problems)
            lines[sub] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, f"{path}[{i}]", lines, problems) for i, v in enumerate(node.value)]
    return _SCALARS.construct_object(node)


_SCALARS = yaml.SafeLoader("")


def _build(
    cls: type[Section], value: object, path: str, lines: dict[str, int], problems: list[tuple[str, int | None, str]]
) -> Section | None:
    """Construct dataclass `cls` from plain data, recording type problems instead of raising."""
    if not isinstance(value, dict):
        problems.append((path, lines.get(path), f"must be a mapping, got {_kind(value)}"))
        return None
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in names:
            sub = f"{path}.{key}" if path else str(key)
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append((sub, lines.get(sub), f"unknown key; {hint}known keys here: {', '.join(sorted(names))}"))
    kwargs = {}
    for f in dataclasses.fields(cls):
        sub = f"{path}.{f.name}" if path else f.name
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append((sub, lines.get(path), "required key is missing"))
            continue
        converted = _convert(hints[f.name], value[f.name], sub, lines, problems)
        if converted is not _BAD:
            kwargs[f.name] = converted
    try:
        return cls(**kwargs)
    except TypeError:
        return None  # a missing required key, already reported


_BAD = object()


def _convert(tp: Any, value: Any, path: str, lines: dict[str, int], problems: list[tuple[str, int | None, str]]) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        if len(args) > 1:
            variant = _variant(args, value, path, lines, problems)
            return _BAD if variant is None else _convert(variant, value, path, lines, problems)
        return _convert(args[0], value, path, lines, problems)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            problems.append((path, lines.get(path), f"unknown value {value!r}; choose one of {list(choices)}"))
            return _BAD
        return value
    if dataclasses.is_dataclass(tp):
        built = _build(cast("type[DataclassInstance]", tp), value, path, lines, problems)
        return _BAD if built is None else built
    if origin is tuple:
        if not isinstance(value, list):
            problems.append((path, lines.get(path), f"must be a list, got {_kind(value)}"))
            return _BAD
        items: list[Any] | dict[Any, Any] = [
            _convert(typing.get_args(tp)[0], v, f"{path}[{i}]", lines, problems) for i, v in enumerate(value)
        ]
        return _BAD if _BAD in items else tuple(items)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            problems.append((path, lines.get(path), f"must be a mapping, got {_kind(value)}"))
            return _BAD
        if origin is not dict or typing.get_args(tp)[1] is typing.Any:
            return value
        items = {k: _convert(typing.get_args(tp)[1], v, f"{path}.{k}", lines, problems) for k, v in value.items()}
        return _BAD if _BAD in items.values() else items
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _is_float(value):
        return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string; a float field means the number
    if tp is int and isinstance(value, float) and value.is_integer() and abs(value) >= 1e3:
        return int(value)  # 1e6 frames is a natural way to write a count
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        problems.append((path, lines.get(path), f"must be {tp.__name__}, got {_kind(value)} {value!r}"))
        return _BAD
    return value


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")


def _variant(
    classes: list[type], value: object, path: str, lines: dict[str, int], problems: list[tuple[str, int | None, str]]
) -> type | None:
    """Which dataclass of a union a mapping is, by its `name` key (its Literal type); the first by default.
    A dotted name ("pkg.mod:Config") is a user's algorithm config class, imported here so that a typo
    fails at validation, with its line, rather than in every worker."""
    names = {typing.get_args(typing.get_type_hints(c)["name"])[0]: c for c in classes}
    name = value.get("name", next(iter(names))) if isinstance(value, dict) else None
    if isinstance(name, str) and ":" in name:
        return _user_algorithm(name, f"{path}.name", lines, problems)
    if name is not None and name not in names:
        sub = f"{path}.name"
        problems.append((sub, lines.get(sub), f"unknown value {name!r}; choose one of {list(names)}"))
        return None
    return names.get(name, classes[0])


def _user_algorithm(
    name: str, path: str, lines: dict[str, int], problems: list[tuple[str, int | None, str]]
) -> type | None:
    try:
        cls: type = load_object(name)
    except ValueError as e:
        problems.append((path, lines.get(path), str(e)))
        return None
    if not (
        dataclasses.is_dataclass(cls)
        and isinstance(getattr(cls, "spec", None), AlgorithmSpec)
        and "name" in {f.name for f in dataclasses.fields(cls)}
    ):
        problems.append(
            (
                path,
                lines.get(path),
                f"{name!r} must be a dataclass with a `name` field and a class "
                f"attribute `spec` (an srl_hpc.algorithm_spec.AlgorithmSpec)",
            )
        )
        return None
    return cls


def _collect_checks(obj, path, lines, problems) -> None:
    """Run every nested dataclass's check() and attach the key path and line of each problem."""
    if hasattr(obj, "check"):
        for key, message in obj.check():
            sub = ".".join(p for p in (path, key) if p)
            line = lines.get(sub) or lines.get(sub.rsplit(".", 1)[0] if "." in sub else "") or lines.get(path)
            problems.append((sub, line, message))
    for f in dataclasses.fields(obj):
        child = getattr(obj, f.name)
        if dataclasses.is_dataclass(child):
            _collect_checks(child, f"{path}.{f.name}" if path else f.name, lines, problems)


def _kind(value) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
