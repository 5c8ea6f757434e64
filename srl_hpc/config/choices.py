"""The keys that take one of a few values, as `Literal` types: the loader checks a value against the type
itself, so each list of allowed values exists once, here."""

from __future__ import annotations

from typing import Literal

Precision = Literal["fp32", "bf16"]
EnvBackend = Literal["auto", "sync", "vector", "envpool"]
InferenceTransport = Literal["auto", "zmq", "shm"]
Placement = Literal["srl", "impala", "seed"]
Recurrence = Literal["none", "gru", "lstm"]
ActionSquash = Literal["clip", "tanh"]
OpponentRule = Literal["none", "latest", "uniform", "pfsp"]
