"""The layering of pyproject.toml's import contracts (checked by `make lint`'s lint-imports) names every module
and package of the runtime: one it does not name could import anything."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_runtime_module_has_a_layer():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    runtime = next(c for c in contracts if c["name"] == "the runtime's layers only point down")
    layered = {name for layer in runtime["layers"] for name in re.split(r"\s*[|:]\s*", layer)}
    children = {f"srl_hpc.{p.stem}" for p in (ROOT / "srl_hpc").glob("*.py") if p.stem != "__init__"} | {
        f"srl_hpc.{p.parent.name}" for p in (ROOT / "srl_hpc").glob("*/__init__.py")
    }
    assert children - layered == set(), "give these a layer in pyproject.toml [tool.importlinter]"
    assert layered - children == set(), "these layers name no module of srl_hpc"
