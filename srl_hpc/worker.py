"""Entry point of every worker process, local or Slurm: `python -m srl_hpc.worker --run-dir D --task-id N`.

Task N hosts worker N of `endpoints.all_workers(experiment)`. Under Slurm the task id defaults to
SLURM_PROCID and rendezvous goes through MPI; locally through files in the run directory.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path

from launcher import config
from srl_hpc.services.rendezvous import FileRendezvous, MpiRendezvous, advertised_host
from srl_hpc.streams import endpoints

# module:class per worker kind, imported on demand so that actors never import torch
WORKER_CLASSES = {
    "controller": "srl_hpc.system.controller:Controller",
    "trainer": "srl_hpc.system.trainer:TrainerWorker",
    "policy": "srl_hpc.system.policy:PolicyWorker",
    "actor": "srl_hpc.system.actor:ActorWorker",
}


def worker_class(kind: str):
    module, _, cls = WORKER_CLASSES[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m srl_hpc.worker", description=__doc__)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--task-id", type=int, default=None, help="default: $SLURM_PROCID")
    parser.add_argument("--rendezvous", choices=("file", "mpi"), default="file")
    parser.add_argument("--log-dir", type=Path, help="send this worker's output to LOG_DIR/<worker>.log")
    args = parser.parse_args(argv)
    task_id = args.task_id if args.task_id is not None else int(os.environ["SLURM_PROCID"])

    exp = config.load(args.run_dir / "experiment.yaml")
    names = endpoints.all_workers(exp)
    name = names[task_id]
    kind, index = endpoints.parse_worker(name)
    if args.log_dir:
        _redirect_output(args.log_dir / (name.replace("/", "-") + ".log"))
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    log = logging.getLogger("srl_hpc.worker")

    rendezvous = MpiRendezvous() if args.rendezvous == "mpi" else FileRendezvous(args.run_dir, len(names))
    # Before torch loads: idle OpenMP threads sleep instead of spinning, so a trainer's threads do not
    # steal the cores its actors and policy workers share with it. A user's setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    worker = worker_class(kind)(exp, index, args.run_dir, local_rank=rendezvous.local_rank)
    try:
        ports = worker.bind()
        if hasattr(worker, "record_startup"):
            worker.record_startup()
        entry = {"worker": name, "host": advertised_host(rendezvous.local), "ports": ports,
                 "pid": os.getpid(), "node": os.environ.get("SLURMD_NODENAME", os.uname().nodename)}
        table = rendezvous.exchange(entry, names)  # a signal until here ends the process at once
        # From now on SIGTERM (scancel, the local launcher) and SIGINT wind down cleanly, keeping checkpoints.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: worker.request_stop())
        log.info("rendezvous done: %d workers", len(table))
        if name == endpoints.CONTROLLER:  # where every worker runs, for status and post-mortems
            (args.run_dir / "workers.json").write_text(json.dumps(table, indent=1))
        worker.connect(table)
        code = worker.run()
        log.info("%s ended", name)
        return code or 0
    except Exception as exc:  # noqa: BLE001  any failure is reported with the worker's name
        traceback.print_exc()
        if hasattr(worker, "report_failure"):
            worker.report_failure(exc)
        return 1
    finally:
        worker.close()


def _redirect_output(path: Path) -> None:
    """Under srun all tasks share one output; each worker keeps its own file instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)  # line-buffered: `srl-launch logs -f` sees lines as they come


if __name__ == "__main__":
    sys.exit(main())
