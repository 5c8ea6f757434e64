"""srl-hpc compute-node runtime: workers, streams, services and algorithms."""

__version__ = "0.1.0"
