"""doctor --probe: what the probe job's tasks found (srl_hpc.probe.collect), judged per group: host and
address, CPUs bound, GPUs and open-files limits here; the file rendezvous, ZMQ between groups, gloo and NCCL
among the trainers and MPI in probe_network.py. Pure functions of the plan and the tasks' JSON; the unit tests
feed them recorded reports."""

from __future__ import annotations

from collections.abc import Callable

from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result, compact
from launcher.probe_network import judge_collectives, judge_mpi, judge_pings, judge_rendezvous
from launcher.probe_settings import limit_text
from srl_hpc import config
from srl_hpc.services import limits, network


def _by_value(plan_group: planning.HetGroup, facts: dict, value: Callable[[dict], str]) -> str:
    """'v' when every task of the group has the same, else 'actor/0-1: v1; actor/2: v2'."""
    seen: dict[str, list[str]] = {}
    for name in plan_group.workers:
        if name in facts:
            seen.setdefault(value(facts[name]), []).append(name)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{compact(names)}: {v}" for v, names in seen.items())


def _cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'"""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def judge_reports(plan: planning.Plan, found: dict) -> list[Result]:
    """Every task reported its facts and its results; the missing ones are named (their logs say why)."""
    names = [w for g in plan.groups for w in g.workers]
    missing_facts = [n for n in names if n not in found["facts"]]
    missing_results = [n for n in names if n in found["facts"] and n not in found["results"]]
    out = []
    if missing_facts:
        out.append(
            (
                FAIL,
                f"{len(missing_facts)} of {len(names)} tasks never started their probe: {compact(missing_facts)}",
                "their logs (logs/<worker>.log in the probe directory) and the job's output say why",
            )
        )
    if missing_results:
        out.append(
            (
                FAIL,
                f"{len(missing_results)} task(s) started but never finished: {compact(missing_results)}",
                "their logs (logs/<worker>.log in the probe directory) say where they stopped",
            )
        )
    return out


def _address_text(f: dict) -> str:
    a = f["address"]
    return f"{f['node']} {a['ip']} ({a['interface'] or 'no interface'}; {a['source']})"


def judge_addresses(plan: planning.Plan, setting: str | None, facts: dict) -> list[Result]:
    """Per group: the node and the address `slurm.network` picks on it; a node where it picks none, or a loopback
    address (which a worker refuses when the job has several nodes or, slurm.layout: jobs, the run several jobs,
    and slurm.network is unset)."""
    nodes = {f["node"] for f in facts.values()}
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        failed = {n: f["address_error"] for n, f in mine.items() if f["address_error"]}
        if failed:
            first = next(iter(failed.values()))
            out.append(
                (
                    FAIL,
                    f"group {g.name}: {compact(failed)}: {first}",
                    f"set {network.SETTING} to an interface (e.g. ib0) or network (10.0.0.0/8) that every node "
                    f"of every group has",
                )
            )
            continue
        text = _by_value(g, mine, _address_text)
        loop = [n for n, f in mine.items() if f["address"]["loopback"]]
        if loop and (len(nodes) > 1 or plan.layout == "jobs"):
            message = (
                f"group {g.name}: {text}: a loopback address, which the job's other nodes cannot reach"
                if len(nodes) > 1
                else f"group {g.name}: {text}: a loopback address, which the other groups' jobs "
                f"cannot reach once they run on other nodes"
            )
            if setting is None:
                out.append(
                    (
                        FAIL,
                        message,
                        f"set {network.SETTING} to the interface that connects the nodes (e.g. "
                        f"ib0) or its network; each task's interfaces are in its log",
                    )
                )
            else:
                out.append((WARN, message, f"{network.SETTING} names it: only nodes on one host meet there"))
            continue
        out.append((OK, f"group {g.name}: {compact(mine)} on {text}", ""))
    return out


def judge_cpus(plan: planning.Plan, facts: dict, binds: bool | None = None) -> list[Result]:
    """Per group: the CPUs each task may run on (sched_getaffinity) against slurm.<group>.cpus_per_task, and
    tasks on one node bound to the same CPUs. binds: whether the TaskPlugin binds tasks (None: not known). A
    task given every CPU of its node is unbound only where nothing binds: with two hardware threads per core
    one CPU asked for can be a whole small node's core."""
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        asked = g.cpus_per_task
        unbound = [] if binds else [n for n, f in mine.items() if len(f["cpus"]) >= (f["node_cpus"] or 0) > asked]
        short = [n for n, f in mine.items() if len(f["cpus"]) < asked]
        shared = []
        for n, f in mine.items():
            if n in unbound or (binds is False):
                continue
            for other, h in facts.items():
                if other != n and h["node"] == f["node"] and set(h["cpus"]) & set(f["cpus"]):
                    both = _cpu_list(sorted(set(h["cpus"]) & set(f["cpus"])))
                    shared.append(f"{n} and {other} on {f['node']} (CPUs {both})")
        text = _by_value(g, mine, lambda f: f"{len(f['cpus'])} CPU(s) on {f['node']} [{_cpu_list(f['cpus'])}]")
        head = f"group {g.name} (cpus_per_task {asked}): "
        if short:
            out.append(
                (
                    FAIL,
                    head + f"{compact(short)} may run on fewer CPUs than asked: {text}",
                    "Slurm gave fewer CPUs than --cpus-per-task: with two hardware threads per core, "
                    "slurm.threads_per_core: 1 (whole cores), or ask the admins about the node's CpuBind",
                )
            )
        elif unbound:
            out.append(
                (
                    WARN,
                    head + f"{compact(unbound)} not bound: each may run on all "
                    f"{mine[unbound[0]]['node_cpus']} CPUs of its node ({text})",
                    "TaskPlugin above: without binding, keep workers.<kind>.torch_threads at most cpus_per_task",
                )
            )
        elif shared and not g.overcommit:
            out.append(
                (
                    WARN,
                    head + f"bound, but tasks share CPUs: {'; '.join(shared[:4])}",
                    "two tasks on one node share the CPUs Slurm bound them to (overcommit, or nodes declaring "
                    "more CPUs than they have): they run at half speed each",
                )
            )
        else:
            more = any(len(f["cpus"]) > asked for f in mine.values())
            out.append(
                (
                    OK,
                    head
                    + f"bound to {text}"
                    + ("; more than asked: the hardware threads of whole cores" if more else ""),
                    "",
                )
            )
    return out


def _gpu_identity(f: dict) -> str | None:
    pick = f.get("gpu_pick") or {}
    return f"{f['node']}/{pick['uuid']}" if pick.get("uuid") else None


def _gpu_text(f: dict) -> str:
    env = f["gpus"]["env"]
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if v) or "no GPU variable set"
    view = f["gpus"].get("torch")
    if view is None:
        return shown
    if "error" in view:
        return f"{shown}; {view['error']}"
    if view["devices"]:
        return f"{shown}; torch sees " + ", ".join(f"{d['index']}: {d['uuid']}" for d in view["devices"])
    return f"{shown}; torch sees no CUDA device" + (f" ({view['why_none']})" if view.get("why_none") else "")


def judge_gpus(plan: planning.Plan, exp: config.Experiment, facts: dict) -> list[Result]:
    """Per group: the GPUs each task sees (Slurm's variables, torch's UUIDs); a CUDA worker without a GPU it
    can take, and two CUDA workers on one physical GPU (unless the group's share_gpu says they may)."""
    by_gpu: dict[str, list[str]] = {}
    for n, f in facts.items():
        identity = _gpu_identity(f)
        if identity:
            by_gpu.setdefault(identity, []).append(n)
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        cuda = [n for n, f in mine.items() if f["device"].startswith("cuda")]
        given = any(v for f in mine.values() for v in f["gpus"]["env"].values())
        head = f"group {g.name}: "
        if not cuda and not given and not g.gpus_per_node:
            out.append((OK, head + "no GPU asked for, none given", ""))
            continue
        text = _by_value(g, mine, _gpu_text)
        failed = {n: mine[n]["gpu_pick"]["error"] for n in cuda if (mine[n].get("gpu_pick") or {}).get("error")}
        if failed:
            n, why = next(iter(failed.items()))
            out.append(
                (
                    FAIL,
                    head + f"{compact(failed)} on device cuda cannot take a GPU: {why}",
                    f"give the group GPUs (slurm.{g.name}.gpus_per_node, at most one CUDA worker per GPU), a CUDA "
                    f"build of torch where the workers run, or slurm.{g.name}.share_gpu: true",
                )
            )
            continue
        crowded = [(gpu, names) for gpu, names in by_gpu.items() if len(names) > 1 and set(names) & set(cuda)]
        share = getattr(exp.slurm, g.name).share_gpu
        if crowded and not share:
            gpu, names = crowded[0]
            out.append(
                (
                    FAIL,
                    head + f"{', '.join(names)} would use one physical GPU ({gpu})",
                    f"give each CUDA worker its own GPU (slurm.{g.name}.gpus_per_node, tasks_per_node), or "
                    f"slurm.{g.name}.share_gpu: true if they may share",
                )
            )
            continue
        sharing = ", ".join(n for _, names in crowded for n in names)
        note = f"; {sharing} share GPUs, as share_gpu allows" if crowded else ""
        picks = [f"{n} -> {mine[n]['gpu_pick']['uuid']}" for n in cuda if (mine[n].get("gpu_pick") or {}).get("uuid")]
        out.append((OK, head + text + (f"; CUDA workers take: {', '.join(picks)}" if picks else "") + note, ""))
    return out


def judge_nofile(plan: planning.Plan, facts: dict) -> list[Result]:
    """Per group: the soft and hard open-files limits inside the tasks against what each worker needs
    (srl_hpc.services.limits.descriptors_needed): the worker raises its soft limit to the hard one at start,
    so only a hard limit under the need fails."""
    out = []
    for g in plan.groups:
        mine = {n: facts[n] for n in g.workers if n in facts}
        if not mine:
            continue
        low = [
            (n, f["nofile"])
            for n, f in mine.items()
            if f["nofile"]["hard"] is not None and f["nofile"]["hard"] < f["nofile"]["needed"]
        ]
        if low:
            n, lim = max(low, key=lambda item: item[1]["needed"])
            out.append(
                (
                    FAIL,
                    f"group {g.name}: " + limits.too_few_files(n, lim["needed"], lim["workers"], lim["hard"]),
                    "raise the hard open-files limit on the nodes (the cluster's admins), or give each server "
                    "fewer clients (more policy workers or trainers)",
                )
            )
            continue
        text = _by_value(
            g, mine, lambda f: f"soft {limit_text(f['nofile']['soft'])}, hard {limit_text(f['nofile']['hard'])}"
        )
        worst = max(mine, key=lambda n: mine[n]["nofile"]["needed"])
        need = mine[worst]["nofile"]["needed"]
        raised = any(
            f["nofile"]["soft"] is not None and f["nofile"]["soft"] < f["nofile"]["needed"] for f in mine.values()
        )
        out.append(
            (
                OK,
                f"group {g.name}: open files {text}; the most a worker here needs is about {need} ({worst})"
                + ("; the workers raise their soft limit to the hard one at start" if raised else ""),
                "",
            )
        )
    return out


def judge_found(plan: planning.Plan, exp: config.Experiment, found: dict, binds: bool | None = None) -> list[Result]:
    """Every judgement of what the tasks wrote (srl_hpc.probe.collect), in the order they are printed."""
    return [
        *judge_addresses(plan, exp.slurm.network, found["facts"]),
        *judge_cpus(plan, found["facts"], binds),
        *judge_gpus(plan, exp, found["facts"]),
        *judge_nofile(plan, found["facts"]),
        judge_rendezvous(plan, found),
        *judge_pings(plan, found),
        *judge_collectives(plan, exp, found),
        judge_mpi(plan, found),
    ]
