"""srl-hpc's login-node side: experiment files, planning, rendering and launching (local or Slurm)."""

from launcher.api import Run, submit

__all__ = ["Run", "submit"]
