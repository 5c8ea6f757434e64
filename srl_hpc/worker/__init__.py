"""The runtime: one worker process (process.py, entered by `python -m srl_hpc.worker`) and the supervisor that
replaces a restartable worker inside its task (supervisor.py)."""
