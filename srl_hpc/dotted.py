"""User code by dotted path: 'package.module:Name' in an experiment (an env factory, a model class)."""

from __future__ import annotations

import importlib
from typing import Any


def load_object(path: str) -> Any:
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {path!r}: {e}") from None
