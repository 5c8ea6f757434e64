"""Scale: the same experiment at growing actor counts, one heterogeneous Slurm job each.

    SRL_SLURM_HOSTS=shared bash scripts/local_slurm.sh start
    python benchmarks/scale.py --actors 16,64,128,256

The local Slurm's virtual nodes, in its shared mode (one host, its loopback: slurm.network lo), declare more
CPUs than the machine has (160 each), so hundreds of actors share its cores; `experiments/scale_synthetic.yaml`
steps a synthetic env that waits instead of computing, so what is measured is the system's own cost. Per actor
count N it prints, from the run's traces and summary:
- seconds from the first worker process start to rendezvous done (the last worker out of the MPI
  allgather), to the trainer's first segment, to its first update;
- the controller's CPU share of one core and the events it takes in per second, while training;
- message rates: inference requests served, segments received, weight versions published (per second);
  the policy workers' CPU per request and the trainer's CPU share;
- parameter bytes leaving trainer/0 per version (weight fan-out);
- actor memory (RSS, median and max), the two-phase stop's seconds, and frame accounting
  (sent == received == consumed + dropped);
- in the JSON line, what the rendezvous model is made of: own start-up CPU per actor and of the other
  workers, the ranks' seconds and CPU waiting for each other (in MPI_Init and at the rendezvous).
Then the scaling model's check (docs/scaling.md): rendezvous time, controller events and CPU, from the costs
measured at every N but the largest, predicted at the largest, compared with the measurement. Then one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import launcher  # noqa: E402
from srl_hpc.trace.analysis import policy_cost, rate, slope  # noqa: E402
from srl_hpc.trace.reader import read_run  # noqa: E402

DEFAULT_EXPERIMENT = Path(__file__).resolve().parents[1] / "experiments" / "scale_synthetic.yaml"
LOCAL_PROFILE = Path(__file__).resolve().parents[1] / "clusters" / "local.yaml"
# the local Slurm's shared mode differs from its profile's (namespaced) cluster: one host, reached on its loopback,
# with nodes of 160 CPUs, so that one node holds many actors
SHARED_MODE = ["slurm.network=lo", "slurm.actor.tasks_per_node=128"]


def figures(run_dir: Path) -> dict:
    """The scale figures of one finished run."""
    trace = read_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    by_name = {w.name: w for w in trace.workers}
    controller, trainer = by_name["controller/0"], by_name["trainer/0"]
    started = min(
        float(w.table("startup")["t"][0] - w.table("startup")["seconds"][0])
        for w in trace.workers
        if len(w.table("startup")["t"])
    )
    rendezvous = max(float(w.table("rendezvous")["t"][-1]) for w in trace.workers if len(w.table("rendezvous")["t"]))
    first_sample = float(trainer.table("segment")["t"][0])
    first_update = float(trainer.table("train_step")["t"][0])
    stopped = controller.table("stop")
    end = float(stopped["t"][-1] - stopped["seconds"][-1])  # when the controller decided to stop
    actors = [w for w in trace.workers if w.kind == "actor"]
    actor_rss = [float(np.max(w.table("heartbeat")["rss_mb"])) for w in actors if len(w.table("heartbeat")["t"])]
    counters = summary["counters"]
    versions = counters.get("parameter_versions_sent", 0)
    controller_cpu = slope(controller.table("heartbeat"), "cpu_seconds", first_update, end)
    events = slope(controller.table("progress"), "events_received", first_update, end)
    trainer_cpu = slope(trainer.table("heartbeat"), "cpu_seconds", first_update, end)
    policy = policy_cost(trace, first_update, end)
    # each worker's own start-up CPU (MPI_Init's waiting taken out), and the seconds and CPU it spent waiting
    # for the others: in MPI_Init, which every rank must reach, and at the rendezvous itself
    startup_cpu, wait_s, wait_cpu = {}, 0.0, 0.0
    for w in trace.workers:
        start, rdv = w.table("startup"), w.table("rendezvous")
        if len(start.get("mpi_init_cpu_seconds", [])) and len(rdv.get("cpu_seconds", [])):
            startup_cpu[w.name] = float(start["cpu_seconds"][0] - start["mpi_init_cpu_seconds"][0])
            wait_s += float(start["mpi_init_seconds"][0] + rdv["seconds"][-1])
            wait_cpu += float(start["mpi_init_cpu_seconds"][0] + rdv["cpu_seconds"][-1])
    return {
        "actors": len(actors),
        "workers": len(trace.workers),
        "status": summary["status"],
        "start_to_rendezvous_s": round(rendezvous - started, 2),
        # what the rendezvous model is made of: own start-up CPU (an actor's, the other workers' in all), and
        # the ranks' time and CPU waiting for each other, summed over ranks
        "actor_startup_cpu_s": round(float(np.mean([startup_cpu[w.name] for w in actors if w.name in startup_cpu])), 3)
        if startup_cpu
        else None,
        "others_startup_cpu_s": round(sum(c for name, c in startup_cpu.items() if by_name[name].kind != "actor"), 3),
        "rendezvous_wait_s": round(wait_s, 1),
        "rendezvous_wait_cpu_s": round(wait_cpu, 2),
        "start_to_first_sample_s": round(first_sample - started, 2),
        "start_to_first_update_s": round(first_update - started, 2),
        "controller_cpu_share": None if controller_cpu is None else round(controller_cpu, 4),
        "controller_events_per_s": None if events is None else round(events, 1),
        "inference_requests_per_s": policy["requests_per_s"],
        "policy_cpu_share": policy["cpu_share"],  # all policy workers together, of one core
        "policy_cpu_us_per_request": policy["cpu_us_per_request"],
        "trainer_cpu_share": None if trainer_cpu is None else round(trainer_cpu, 4),
        "segments_received_per_s": round(rate(trainer.table("segment"), None, first_update, end), 2),
        "versions_per_s": round(rate(trainer.table("train_step"), None, first_update, end), 3),
        "parameter_bytes_per_version": round(counters.get("parameter_bytes_sent", 0) / versions) if versions else None,
        "actor_rss_mb_median": round(float(np.median(actor_rss)), 1) if actor_rss else None,
        "actor_rss_mb_max": round(max(actor_rss), 1) if actor_rss else None,
        "stop_s": round(float(stopped["seconds"][-1]), 2),
        "frames_sent": summary["frames_sent"],
        "frames_received": summary["frames_received"],
        "frames_consumed": summary["frames_consumed"],
        "frames_dropped": summary["frames_dropped"],
        "accounting_exact": summary["frames_sent"]
        == summary["frames_received"]
        == summary["frames_consumed"] + summary["frames_dropped"],
        "run_dir": str(run_dir),
    }


COLUMNS = [
    ("actors", "N", "{}"),
    ("start_to_rendezvous_s", "rdv s", "{:.1f}"),
    ("start_to_first_sample_s", "sample s", "{:.1f}"),
    ("start_to_first_update_s", "update s", "{:.1f}"),
    ("controller_cpu_share", "ctl cpu", "{:.1%}"),
    ("controller_events_per_s", "ctl ev/s", "{:.0f}"),
    ("inference_requests_per_s", "infer/s", "{:,.0f}"),
    ("policy_cpu_share", "pol cpu", "{:.1%}"),
    ("segments_received_per_s", "seg/s", "{:.1f}"),
    ("trainer_cpu_share", "trn cpu", "{:.1%}"),
    ("versions_per_s", "ver/s", "{:.2f}"),
    ("parameter_bytes_per_version", "param B/ver", "{:,}"),
    ("actor_rss_mb_median", "actor MB", "{:.0f}"),
    ("stop_s", "stop s", "{:.1f}"),
    ("accounting_exact", "exact", "{}"),
]


def table(rows: list[dict]) -> str:
    cells = [[h for _, h, _ in COLUMNS]]
    cells += [["-" if r.get(k) is None else f.format(r[k]) for k, _, f in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells)


def fit(rows: list[dict], terms, key: str) -> np.ndarray:
    """Least-squares coefficients of `key` over the terms (a function of a row -> list of regressors)."""
    return np.linalg.lstsq(
        np.array([terms(r) for r in rows], float), np.array([r[key] for r in rows], float), rcond=None
    )[0]


def rendezvous_model(known: list[dict]) -> tuple[Callable[[int], float], str]:
    """Time to the rendezvous from costs measured on the known runs. Every worker spends its own start-up
    CPU (s_a an actor, s_0 the other workers in all: constant in N); the workers get C cores' worth of CPU
    in all (the rest goes to Slurm's daemons, srun and the kernel); ranks that wait for the others (in
    MPI_Init, which every rank must reach, then at the rendezvous) take w of it, from those still starting.
    So C T = s_0 + s_a N + w T, and T = (s_0 + s_a N) / (C - w). The waiting ranks' share grows with their
    number until the scheduler gives them no more (docs/scaling.md: 1.3 of 2 cores from N = 128 on), so w is
    the one of the largest known run: the prediction holds for larger N once that share has stopped growing."""
    s_a = float(np.mean([r["actor_startup_cpu_s"] for r in known]))
    s_0 = float(np.mean([r["others_startup_cpu_s"] for r in known]))
    cores = float(
        np.mean(
            [
                (r["actor_startup_cpu_s"] * r["actors"] + r["others_startup_cpu_s"] + r["rendezvous_wait_cpu_s"])
                / r["start_to_rendezvous_s"]
                for r in known
            ]
        )
    )
    largest = max(known, key=lambda r: r["actors"])
    waiting = largest["rendezvous_wait_cpu_s"] / largest["start_to_rendezvous_s"]
    return (lambda n: (s_0 + s_a * n) / (cores - waiting)), f"({s_0:.3g} + {s_a:.3g} N) / ({cores:.3g} - {waiting:.3g})"


def check_model(rows: list[dict]) -> dict:
    """The scaling model of docs/scaling.md, from the per-worker and per-message costs of every N but the
    largest, checked at the largest:
    - rendezvous: `rendezvous_model`;
    - controller events: e0 + e N (reports, one per worker per second below 1000 workers);
    - controller CPU: c0 + c x events, at the predicted events."""
    done = [r for r in rows if r.get("status") == "succeeded"]
    if len(done) < 3:
        return {}
    known, last = done[:-1], done[-1]
    n = last["actors"]
    rdv, rdv_formula = rendezvous_model(known)
    ev = fit(known, lambda r: [1, r["actors"]], "controller_events_per_s")
    cpu = fit(known, lambda r: [1, r["controller_events_per_s"]], "controller_cpu_share")
    events = ev[0] + ev[1] * n
    predicted = {
        "start_to_rendezvous_s": (rdv(n), rdv_formula),
        "controller_events_per_s": (events, f"{ev[0]:.4g} + {ev[1]:.4g} N"),
        "controller_cpu_share": (cpu[0] + cpu[1] * events, f"{cpu[0]:.4g} + {cpu[1]:.4g} x events/s"),
    }
    return {
        key: {
            "formula": formula,
            "predicted": value,
            "measured": last[key],
            "error": abs(value - last[key]) / last[key] if last[key] else None,
        }
        for key, (value, formula) in predicted.items()
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", type=Path, default=DEFAULT_EXPERIMENT)
    p.add_argument("--actors", default="16,64,128,256", help="comma-separated actor counts, one job each")
    p.add_argument("--out", type=Path, default=Path("runs/scale"), help="run directories go under OUT/actors-N")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides, for every N")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for each job")
    args = p.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.actors.split(",")]:
        run_dir = args.out / f"actors-{n}"
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists; remove it or pass another --out")
        t0 = time.monotonic()
        run = launcher.submit(
            args.experiment,
            slurm=True,
            run_dir=run_dir,
            profiles=[LOCAL_PROFILE],
            overrides=[f"workers.actor.count={n}", *SHARED_MODE, *args.set],
        )
        print(f"N={n}: job {run.job_id}, run directory {run_dir}", flush=True)
        state = run.wait(timeout=args.timeout)
        if run.summary() is None:
            print(f"N={n}: the job ended {state} without a summary; see {run_dir}/logs", flush=True)
            rows.append({"actors": n, "status": state, "run_dir": str(run_dir)})
            continue
        row = {**figures(run_dir), "job_seconds": round(time.monotonic() - t0, 1)}
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
    print(table(rows))
    model = check_model(rows)
    for key, m in model.items():
        print(
            f"model: {key} = {m['formula']} (fitted below N={rows[-1]['actors']}): predicted {m['predicted']:.4g}, "
            f"measured {m['measured']:.4g}" + ("" if m["error"] is None else f", error {m['error']:.0%}")
        )
    print(json.dumps({"experiment": str(args.experiment), "rows": rows, "model": model}))
    return 0 if all(r.get("status") == "succeeded" and r.get("accounting_exact") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
