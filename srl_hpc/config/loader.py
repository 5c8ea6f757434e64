"""YAML -> a validated Experiment. Every problem of a file is collected and reported together, each naming
its key path and YAML line, before any process starts. Unknown keys are errors."""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Optional

import yaml

from srl_hpc.algorithms import AlgorithmSpec
from srl_hpc.config.schema import Experiment, SlurmConfig
from srl_hpc.dotted import load_object


class ConfigError(ValueError):
    """All problems of one experiment file; str() lists one per line as 'FILE:LINE: key.path: message'."""

    def __init__(self, source: str, problems: list[tuple[str, Optional[int], str]]):
        self.source = source
        self.problems = sorted(problems, key=lambda p: (p[1] is None, p[1] or 0))
        where = (lambda line: source) if source == "--set" else (lambda line: f"{source}:{line if line else '?'}")
        lines = [f"{where(line)}: {path or '<top>'}: {msg}" for path, line, msg in self.problems]
        super().__init__(f"{len(problems)} problem(s) in {source}:\n" + "\n".join(lines))


def load(path: str | Path, cluster: str | Path | None = None) -> Experiment:
    """Read and validate an experiment file; raises ConfigError listing every problem. `cluster`: a cluster
    settings file (its `slurm:` section is the base that the experiment's own `slurm:` keys override)."""
    return loads(_read(path), source=str(path), cluster=None if cluster is None else cluster_settings(cluster))


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
        raise ConfigError(source, [("", mark.line + 1 if mark else None, f"invalid YAML: {getattr(e, 'problem', e)}")]) from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise ConfigError(source, [("", node.start_mark.line + 1 if node else None, "the file must be a mapping of sections")])
    problems: list[tuple[str, Optional[int], str]] = []
    lines: dict[str, int] = {}
    return _to_python(node, "", lines, problems), lines, problems


def cluster_settings(path: str | Path) -> tuple[str, dict]:
    """(path, its `slurm:` section) of a cluster settings file, the keys one cluster's experiments share
    (partitions, network, MPI, account, container...), checked on their own with the file's lines."""
    value, lines, problems = _compose(_read(path), str(path))
    problems += [(key, lines.get(key), "a cluster settings file holds a `slurm:` section only")
                 for key in value if key != "slurm"]
    slurm = value.get("slurm")
    if not isinstance(slurm, dict):
        problems.append(("slurm", lines.get("slurm"), "must be a mapping of Slurm settings"))
    else:
        built = _build(SlurmConfig, slurm, "slurm", lines, problems)
        if built is not None:
            _collect_checks(built, "slurm", lines, problems)
    if problems:
        raise ConfigError(str(path), problems)
    return str(path), slurm


def loads(text: str, source: str = "<string>", cluster: tuple[str, dict] | None = None) -> Experiment:
    value, lines, problems = _compose(text, source)
    if isinstance(value, dict) and "name" not in value and source.endswith((".yaml", ".yml")):
        value["name"] = Path(source).stem
    if cluster is not None:
        value["slurm"] = _merged(cluster[1], value.get("slurm") or {})
    exp = _build(Experiment, value, "", lines, problems)
    if exp is not None:  # value checks too, so one run reports type and value problems together
        _collect_checks(exp, "", lines, problems)
    if problems:
        if cluster is not None:  # a key only the cluster file sets has no line here: say where it came from
            problems = [(path, line, msg if line or not path.startswith("slurm") else f"{msg} (slurm settings of "
                         f"{cluster[0]})") for path, line, msg in problems]
        raise ConfigError(source, problems)
    return exp


def _merged(base: dict, over: dict) -> dict:
    """`over` on top of `base`, section by section (a key of `over` wins; a section merges with base's)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def key_lines(path: str | Path) -> dict[str, int]:
    """The YAML line of every key path of an experiment file ("env.id" -> 7, "algorithm" -> 9), for checks made
    after loading (srl_hpc/config/spaces_check.py); {} where the file cannot be read or parsed."""
    try:
        node = yaml.compose(Path(path).read_text(), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return {}
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        _to_python(node, "", lines, [])
    return lines


def to_dict(exp: Experiment) -> dict:
    """Plain data (lists, dicts, scalars) for writing the resolved config back as YAML."""
    def plain(v):
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
    keys); assignments after it set its keys."""
    data = to_dict(exp)
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
        node[parts[-1]] = value
    try:
        return loads(yaml.safe_dump(data, sort_keys=False), source="--set")
    except ConfigError as e:  # lines of the regenerated YAML would mislead: the key path says it all
        raise ConfigError("--set", [(path, None, msg) for path, _, msg in e.problems]) from None


def _to_python(node, path, lines, problems):
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


def _build(cls, value, path, lines, problems):
    """Construct dataclass `cls` from plain data, recording type problems instead of raising."""
    if not isinstance(value, dict):
        problems.append((path, lines.get(path), f"must be a mapping, got {_kind(value)}"))
        return None
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in names:
            sub = f"{path}.{key}" if path else str(key)
            problems.append((sub, lines.get(sub), f"unknown key; known keys here: {', '.join(sorted(names))}"))
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


def _convert(tp, value, path, lines, problems):
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
        built = _build(tp, value, path, lines, problems)
        return _BAD if built is None else built
    if origin is tuple:
        if not isinstance(value, list):
            problems.append((path, lines.get(path), f"must be a list, got {_kind(value)}"))
            return _BAD
        items = [_convert(typing.get_args(tp)[0], v, f"{path}[{i}]", lines, problems) for i, v in enumerate(value)]
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


def _variant(classes, value, path, lines, problems):
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


def _user_algorithm(name, path, lines, problems):
    try:
        cls = load_object(name)
    except ValueError as e:
        problems.append((path, lines.get(path), str(e)))
        return None
    if not (dataclasses.is_dataclass(cls) and isinstance(getattr(cls, "spec", None), AlgorithmSpec)
            and "name" in {f.name for f in dataclasses.fields(cls)}):
        problems.append((path, lines.get(path), f"{name!r} must be a dataclass with a `name` field and a class "
                                                f"attribute `spec` (an srl_hpc.algorithms.AlgorithmSpec)"))
        return None
    return cls


def _collect_checks(obj, path, lines, problems):
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
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
