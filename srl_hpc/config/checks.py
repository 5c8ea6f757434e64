"""The checks the schema's sections share: each returns (field, problem) pairs for the loader to place."""

from __future__ import annotations


def check_counts(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be >= 1, got {getattr(obj, k)}") for k in keys if getattr(obj, k) < 1]


def check_unit(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be in [0, 1], got {getattr(obj, k)}") for k in keys if not 0.0 <= getattr(obj, k) <= 1.0]


def check_positive(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be > 0, got {getattr(obj, k)}") for k in keys if getattr(obj, k) <= 0]


def check_non_negative(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be >= 0, got {getattr(obj, k)}") for k in keys if getattr(obj, k) < 0]


def check_device(device: str) -> list[tuple[str, str]]:
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not (kind == "cuda" and index.isdigit())):
        return [("device", f"must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")]
    return []
