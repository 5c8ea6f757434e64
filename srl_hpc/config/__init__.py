"""The experiment: its schema (frozen dataclasses) and the YAML loader. Owned by the runtime; the
login-node launcher imports it from here."""

from srl_hpc.config.algorithms import DQNConfig, PPOConfig
from srl_hpc.config.loader import ConfigError, dump, load, loads, replace, to_dict, with_overrides
from srl_hpc.config.schema import AtariConfig, EnvConfig, Experiment, ModelConfig
from srl_hpc.config.slurm import parse_minutes, parse_ports, parse_size_mb

__all__ = [
    "AtariConfig",
    "ConfigError",
    "DQNConfig",
    "EnvConfig",
    "Experiment",
    "ModelConfig",
    "PPOConfig",
    "dump",
    "load",
    "loads",
    "parse_minutes",
    "parse_ports",
    "parse_size_mb",
    "replace",
    "to_dict",
    "with_overrides",
]
