"""doctor --probe: how the probe job's tasks reached each other, judged: the file rendezvous, a ZMQ request and
reply between every pair of groups, gloo and NCCL among the trainers, MPI's world. Pure functions of the plan
and the tasks' JSON (srl_hpc.probe.collect), as probe_findings.py's are."""

from __future__ import annotations

from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result, compact
from srl_hpc import config
from srl_hpc import probe as tasks
from srl_hpc.services import network

RANKS_FIX = (
    "slurm.mpi must name the plugin your mpi4py's MPI starts under (srun --mpi=list; `srl-launch doctor "
    "EXP` checks mpi4py), or slurm.mpi: none (workers meet through files in the run directory)"
)


def judge_rendezvous(plan: planning.Plan, found: dict) -> Result:
    results = found["results"]
    errors = {n: r["rendezvous"]["error"] for n, r in results.items() if (r.get("rendezvous") or {}).get("error")}
    if errors:
        n, why = next(iter(errors.items()))
        return (
            FAIL,
            f"file rendezvous in the probe directory: {compact(errors)} gave up: {why}",
            "every node must see the run directory (a shared filesystem) and every task must start: the logs of "
            "those named say why",
        )
    if not results:
        return FAIL, "file rendezvous: no task got that far", "the tasks' logs say why"
    slowest = max(r["rendezvous"]["seconds"] for r in results.values() if r.get("rendezvous"))
    return (
        OK,
        f"file rendezvous in the probe directory (shared filesystem): all {len(results)} tasks met within "
        f"{slowest:.1f} s",
        "",
    )


def judge_pings(plan: planning.Plan, found: dict) -> list[Result]:
    """A ZMQ request and reply (the run's CURVE keys, slurm.ports) between every pair of groups, both ways: the
    first task of each group pinged every task of the others."""
    facts, results = found["facts"], found["results"]
    groups = [g for g in plan.groups]
    if len(groups) < 2:
        return [(OK, "ZMQ: one het group only, no pair of groups to try", "")]
    pinger = {g.name: g.workers[0] for g in groups}
    out = []
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            failures, times, asked = [], [], []
            unmeasured = []
            for src, dst in ((a, b), (b, a)):
                pings = (results.get(pinger[src.name]) or {}).get("pings")
                if pings is None:
                    unmeasured.append(f"{pinger[src.name]} did not ping (it never got past the rendezvous)")
                    continue
                asked.append(f"{pinger[src.name]} -> {len(dst.workers)} {dst.name} task(s)")
                for target in dst.workers:
                    answer = pings.get(target, {"error": "not pinged"})
                    if "ms" in answer:
                        times.append(answer["ms"])
                    else:
                        where = facts.get(target, {}).get("node", "?")
                        failures.append(f"{pinger[src.name]} -> {target} on {where}: {answer['error']}")
            head = f"ZMQ between {a.name} and {b.name}: "
            if failures:
                out.append(
                    (
                        FAIL,
                        head
                        + "; ".join(failures[:4])
                        + (f" (and {len(failures) - 4} more)" if len(failures) > 4 else ""),
                        f"the nodes of the two groups must reach each other on {network.SETTING}'s addresses "
                        f"(a firewall between partitions: slurm.ports for a range the site opens; or an interface "
                        f"one side lacks)",
                    )
                )
            elif unmeasured:
                out.append((FAIL, head + "not measured: " + "; ".join(unmeasured), "the logs of those named say why"))
            else:
                out.append(
                    (OK, head + f"every task answered ({', '.join(asked)}), slowest round trip {max(times):.1f} ms", "")
                )
    return out


def judge_collectives(plan: planning.Plan, exp: config.Experiment, found: dict) -> list[Result]:
    """gloo all-reduce among each policy's trainers (as their DDP joins), and NCCL where they have GPUs."""
    facts, results = found["facts"], found["results"]
    trainers = [n for g in plan.groups for n in g.workers if n.startswith("trainer/")]
    if not trainers:
        return []
    groups: dict[tuple, list[str]] = {}
    for n in trainers:
        c = (results.get(n) or {}).get("collective")
        if c is not None and "peers" in c:
            groups.setdefault(tuple(c["peers"]), []).append(n)
    out = []
    missing = [n for n in trainers if not any(n in peers for peers in groups)]
    if missing:
        why = [((results.get(n) or {}).get("collective") or {}).get("gloo", {}).get("error") for n in missing]
        out.append(
            (
                FAIL,
                f"gloo all-reduce: {compact(missing)} did not take part"
                + (f": {next(w for w in why if w)}" if any(why) else " (never got past the rendezvous)"),
                "their logs say why",
            )
        )
    for peers, _ in groups.items():
        where = ", ".join(f"{p} on {facts.get(p, {}).get('node', '?')}" for p in peers)
        interface = next((facts[p]["address"]["interface"] for p in peers if facts.get(p, {}).get("address")), None)
        gloo = {p: (results.get(p) or {}).get("collective", {}).get("gloo") or {"error": "no result"} for p in peers}
        bad = {p: r["error"] for p, r in gloo.items() if "error" in r}
        head = f"gloo all-reduce among {len(peers)} trainer task(s) ({where})"
        if bad:
            p, why = next(iter(bad.items()))
            out.append(
                (
                    FAIL,
                    f"{head}: {p}: {why}",
                    f"the trainers' nodes must reach each other on {network.SETTING}'s interface "
                    f"(GLOO_SOCKET_IFNAME is set to it), and the first trainer's store port (within slurm.ports, "
                    f"if set) must be open",
                )
            )
        else:
            slowest = max(r["seconds"] for r in gloo.values())
            out.append(
                (
                    OK,
                    f"{head}"
                    + (f" over {interface}" if interface else "")
                    + f": the sum is right on every rank, within {slowest:.2f} s",
                    "",
                )
            )
        nccl = {p: (results.get(p) or {}).get("collective", {}).get("nccl") for p in peers}
        devices = {facts.get(p, {}).get("device", "cpu") for p in peers}
        if all(v is None for v in nccl.values()):
            if any(d.startswith("cuda") for d in devices):
                out.append(
                    (
                        FAIL,
                        f"NCCL among {', '.join(peers)}: not tried: not every one of them has a GPU it can "
                        "take (the GPU lines above)",
                        "give each trainer a GPU (slurm.trainer.gpus_per_node)",
                    )
                )
            else:
                out.append((OK, "NCCL: not needed: the trainers run on cpu (gloo, above, is what their DDP uses)", ""))
            continue
        skipped = next((r["skipped"] for r in nccl.values() if r and "skipped" in r), None)
        bad = {p: r["error"] for p, r in nccl.items() if r and "error" in r}
        if skipped:
            out.append((WARN, f"NCCL among {', '.join(peers)}: {skipped}", "give each trainer its own GPU for NCCL"))
        elif bad:
            p, why = next(iter(bad.items()))
            out.append(
                (
                    FAIL,
                    f"NCCL all-reduce among {', '.join(peers)}: {p}: {why}",
                    f"NCCL_SOCKET_IFNAME is {network.SETTING}'s interface; NCCL_DEBUG=INFO in slurm.env shows "
                    f"which transport failed",
                )
            )
        else:
            slowest = max(r["seconds"] for r in nccl.values() if r)
            out.append(
                (
                    OK,
                    f"NCCL all-reduce among {len(peers)} trainer GPU(s): the sum is right on every rank, "
                    f"within {slowest:.2f} s",
                    "",
                )
            )
    return out


def judge_mpi(plan: planning.Plan, found: dict) -> Result:
    """The workers' MPI rendezvous (MPI_Init under srun --mpi=<slurm.mpi>, one allgather), last in every task;
    judged once the job has ended, so a phase still "started" never ended."""
    if plan.layout == "jobs":
        return OK, "MPI rendezvous: not used: slurm.layout: jobs meets through files (the file rendezvous above)", ""
    if plan.mpi == "none":
        return OK, "slurm.mpi: none: workers meet through files (the file rendezvous above), no MPI", ""
    names = [w for g in plan.groups for w in g.workers]
    states = {n: (found["results"].get(n) or {}).get("mpi") for n in names}
    failed = {n: s["error"] for n, s in states.items() if s and s.get("state") == "failed"}
    hung = [n for n, s in states.items() if s and s.get("state") == "started"]
    absent = [n for n, s in states.items() if s is None]
    head = f"MPI rendezvous (srun --mpi={plan.mpi}, MPI_Init and one allgather, as the workers do)"
    if failed:
        n, why = next(iter(failed.items()))
        return FAIL, f"{head}: {compact(failed)}: {why}", RANKS_FIX
    if hung:
        return (
            FAIL,
            f"{head}: {compact(hung)} never finished it (within {tasks.MPI_BOUND:.0f} s; their logs hold "
            f"the stack where they waited)",
            RANKS_FIX,
        )
    if absent:
        return FAIL, f"{head}: not reached by {compact(absent)}", "their logs say why"
    done = [s for s in states.values() if s]
    ranks = {s.get("ranks") for s in done}
    return (
        OK,
        f"{head}: all {len(names)} tasks in one world ({done[0].get('library', '?')}), within "
        f"{max(s['seconds'] for s in done):.1f} s" + ("" if ranks == {len(names)} else f" (ranks {ranks})"),
        "",
    )
