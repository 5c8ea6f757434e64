"""Does the experiment's algorithm train on its env? Checked by `srl-launch validate` and before any run or
submission, from the env's spaces built once here (one throw-away env per policy, no workers), so that
an experiment the workers would refuse (DQN on Pendulum's Box actions) fails with its YAML key and line.

Two parts: `space_problems`, a pure function of (algorithm spec, observation space, action space), and
`env_problems`, the glue that builds the spaces (and turns an unknown id, a factory that does not import or
a missing package into a problem naming env.id, not a traceback). `check` raises them as a ConfigError.
Imported by the launcher only: the loader (which every worker runs) builds no env.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence

from srl_hpc.config.loader import ConfigError

# what a space class is called in a message ("algorithm dqn needs discrete actions (Discrete)")
_KINDS = {
    "Discrete": "discrete",
    "MultiDiscrete": "multi-discrete",
    "MultiBinary": "binary",
    "Box": "continuous",
    "Dict": "dict",
}
_OBS_KINDS = {"Box": "array", "Dict": "dict"}
# the package to install for a module an env imports (ModuleNotFoundError.name's top level)
_INSTALL = {
    "ale_py": "pip install ale-py",
    "mujoco": 'pip install "gymnasium[mujoco]"',
    "Box2D": 'pip install swig "gymnasium[box2d]"',
    "minatar": "pip install -e '.[minatar]'",
    "pettingzoo": "pip install -e '.[multiagent]'",
    "mpe2": "pip install -e '.[multiagent]'",
    "envpool": "pip install -e '.[envpool]'",
    "cv2": "pip install opencv-python",
}


def space_problems(
    spec, obs_space, action_space, *, algorithm: str = "the algorithm", env: str = "the env"
) -> list[tuple[str, str]]:
    """(key, message) for each space of the env that `spec` (an AlgorithmSpec) does not train on; [] if none.
    `algorithm` and `env` only name them in the messages."""
    problems = []
    if not _is_one_of(action_space, spec.actions):
        problems.append(
            (
                "algorithm.name",
                f"algorithm {algorithm} needs {_describe(spec.actions, _KINDS)} actions "
                f"({', '.join(spec.actions)}); {env} has {action_space}",
            )
        )
    if not _is_one_of(obs_space, spec.observations):
        problems.append(
            (
                "algorithm.name",
                f"algorithm {algorithm} needs {_describe(spec.observations, _OBS_KINDS)} "
                f"observations ({', '.join(spec.observations)}); {env} has {obs_space}",
            )
        )
    return problems


def _is_one_of(space, names: Sequence[str]) -> bool:
    """Whether `space` is of one of the gymnasium space classes `names` (a subclass counts as its base)."""
    return any(cls.__name__ in names for cls in type(space).__mro__)


def _describe(names: Sequence[str], kinds: dict) -> str:
    words = [kinds.get(n, n) for n in names]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def env_problems(exp) -> list[tuple[str, str]]:
    """(key, message) problems of the experiment's env and its algorithm: the env's spaces, each policy's
    (exp.policies), built as actors build them, then checked against the algorithm's spec."""
    from srl_hpc.algorithm_spec import reads_global_state, spec
    from srl_hpc.envs import backends

    env_id = exp.env.id
    problem: str | tuple[str, str] | None  # (then each problem found below)
    problem = _env_id_problem(env_id)
    if problem:
        return [("env.id", problem)]
    try:
        backends.resolve_backend(exp.env)
    except ValueError as e:
        return [("env.backend", str(e))]
    problems: list[tuple[str, str]] = []
    for policy in list(exp.policies) or [""]:
        try:
            obs_space, action_space = backends.spaces(exp.env, exp.policies, policy, reads_global_state(exp.algorithm))
        except Exception as e:  # noqa: BLE001  whatever the env raises: a problem with its key, not a traceback
            return [_build_problem(exp, e)]
        label = f"{env_id} (policy {policy}'s agents)" if policy else env_id
        found = space_problems(spec(exp.algorithm), obs_space, action_space, algorithm=exp.algorithm.name, env=label)
        for problem in found or contract_problems(exp, obs_space, action_space, label):
            if problem not in problems:
                problems.append(problem)
    if exp.opponents.rule != "none" and not problems and backends.agent_count(exp.env) < 2:
        problems.append(
            (
                "opponents.rule",
                f"self-play needs a game of several seats; {env_id} has one agent "
                "(srl_hpc.envs.connect_four:connect_four is one of two)",
            )
        )
    return problems


def contract_problems(exp, obs_space, action_space, env: str) -> list[tuple[str, str]]:
    """What the message contract cannot carry inside spaces of an accepted class (a Dict of Dicts, a Box of
    actions that is not one vector, tanh squashing into infinite bounds)."""
    from srl_hpc.streams.contract import ActionContract, ObsContract, SpaceError

    problems = []
    try:
        ObsContract(obs_space)
    except SpaceError as e:
        problems.append(("env.id", f"{env}: {e}"))
    try:
        ActionContract(action_space, exp.model.action_squash)
    except SpaceError as e:
        problems.append(("model.action_squash" if "squash" in str(e) else "env.id", f"{env}: {e}"))
    return problems


def _env_id_problem(env_id: str) -> str | None:
    """Why env.id names no env (an unknown id, with close matches; a factory that does not import), or None."""
    import gymnasium

    from srl_hpc.envs import backends

    if backends.is_factory(env_id):
        module, _, name = env_id.partition(":")
        try:
            found = importlib.import_module(module)
        except ImportError as e:
            ours = getattr(e, "name", None) in (module, module.partition(".")[0])  # the factory's own module
            hint = " (is its directory on PYTHONPATH?)" if ours else _install_hint(e)
            return f"cannot import {module!r} for factory {env_id!r}: {e}{hint}"
        except Exception as e:  # noqa: BLE001  the user's module failed while importing
            return f"importing {module!r} for factory {env_id!r} failed: {type(e).__name__}: {e}"
        if not callable(getattr(found, name, None)):
            return f"module {module!r} has no callable {name!r} (env.id {env_id!r} names 'package.module:callable')"
        return None
    try:
        backends.register_namespace(env_id)  # ALE/*, MinAtar/*: registered by their packages
    except ValueError as e:
        return str(e)
    except ImportError as e:
        return f"{env_id!r} needs a package that is not installed: {e}{_install_hint(e)}"
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error:
        matches = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3, cutoff=0.6)
        hint = (
            f"; did you mean {matches[0]}?" + (f" (or {', '.join(matches[1:])})" if matches[1:] else "")
            if matches
            else " (a gymnasium id, or 'package.module:callable' for your own env)"
        )
        return f"unknown env id {env_id!r}{hint}"
    return None


def _build_problem(exp, e: Exception) -> tuple[str, str]:
    """What stopped the env from building, under the key to change."""
    import gymnasium

    env_id = exp.env.id
    if isinstance(e, gymnasium.error.DependencyNotInstalled):
        return "env.id", f"{env_id} needs a package that is not installed: {e}"
    if isinstance(e, ImportError):
        return "env.id", f"{env_id} needs a package that is not installed: {e}{_install_hint(e)}"
    if exp.policies and isinstance(e, ValueError):  # agents that match no policy, or several
        return "policies", str(e)
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return "env.id", f"{env_id} could not be built: {type(e).__name__}: {first}"


def _install_hint(e: ImportError) -> str:
    top = (getattr(e, "name", None) or "").partition(".")[0]
    return f" ({_INSTALL[top]})" if top in _INSTALL else ""


def check(exp, source: str, lines: dict[str, int] | None = None, overrides: Sequence[str] = ()) -> None:
    """Raise a ConfigError ('FILE:LINE: key: message') if env_problems finds any. `lines`: the file's key lines
    (loader.key_lines); `overrides`: the --set assignments applied, whose keys are named as '--set' instead."""
    problems = env_problems(exp)
    if not problems:
        return
    lines = lines or {}
    set_keys = [a.partition("=")[0] for a in overrides]

    def was_set(key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in set_keys)

    named = [(key, None if was_set(key) else _line(key, lines), message) for key, message in problems]
    # what a --set put there has no line in the file
    raise ConfigError("--set" if all(was_set(key) for key, _ in problems) else source, named)


def _line(key: str, lines: dict[str, int]) -> int | None:
    """The line of `key`, else of its section (algorithm.name defaulted: the `algorithm` line), else None."""
    return lines.get(key) or (lines.get(key.rpartition(".")[0]) if "." in key else None)
