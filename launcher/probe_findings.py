"""doctor --probe: what the probe job's tasks found (srl_hpc.probe.collect), judged per group: host and
address, CPUs bound, GPUs, open-files limits, the file rendezvous, ZMQ between groups, gloo and NCCL among
the trainers, MPI. Pure functions of the plan and the tasks' JSON; the unit tests feed them recorded reports."""
from __future__ import annotations

from collections.abc import Callable

from launcher import plan as planning
from launcher.findings import FAIL, OK, WARN, Result
from launcher.probe_settings import limit_text
from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc import probe as tasks
from srl_hpc.services import limits, network

RANKS_FIX = ("slurm.mpi must name the plugin your mpi4py's MPI starts under (srun --mpi=list; `srl-launch doctor "
             "EXP` checks mpi4py), or slurm.mpi: none (workers meet through files in the run directory)")


def _compact(names) -> str:
    return ", ".join(wiring.compact(names))


def _by_value(plan_group: planning.HetGroup, facts: dict, value: Callable[[dict], str]) -> str:
    """'v' when every task of the group has the same, else 'actor/0-1: v1; actor/2: v2'."""
    seen: dict[str, list[str]] = {}
    for name in plan_group.workers:
        if name in facts:
            seen.setdefault(value(facts[name]), []).append(name)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{_compact(names)}: {v}" for v, names in seen.items())


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
        out.append((FAIL, f"{len(missing_facts)} of {len(names)} tasks never started their probe: "
                          f"{_compact(missing_facts)}",
                    "their logs (logs/<worker>.log in the probe directory) and the job's output say why"))
    if missing_results:
        out.append((FAIL, f"{len(missing_results)} task(s) started but never finished: {_compact(missing_results)}",
                    "their logs (logs/<worker>.log in the probe directory) say where they stopped"))
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
            out.append((FAIL, f"group {g.name}: {_compact(failed)}: {first}",
                        f"set {network.SETTING} to an interface (e.g. ib0) or network (10.0.0.0/8) that every node "
                        f"of every group has"))
            continue
        text = _by_value(g, mine, _address_text)
        loop = [n for n, f in mine.items() if f["address"]["loopback"]]
        if loop and (len(nodes) > 1 or plan.layout == "jobs"):
            message = f"group {g.name}: {text}: a loopback address, which the job's other nodes cannot reach" \
                if len(nodes) > 1 else f"group {g.name}: {text}: a loopback address, which the other groups' jobs " \
                                       f"cannot reach once they run on other nodes"
            if setting is None:
                out.append((FAIL, message, f"set {network.SETTING} to the interface that connects the nodes (e.g. "
                                           f"ib0) or its network; each task's interfaces are in its log"))
            else:
                out.append((WARN, message, f"{network.SETTING} names it: only nodes on one host meet there"))
            continue
        out.append((OK, f"group {g.name}: {_compact(mine)} on {text}", ""))
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
        unbound = [] if binds else \
            [n for n, f in mine.items() if len(f["cpus"]) >= (f["node_cpus"] or 0) > asked]
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
            out.append((FAIL, head + f"{_compact(short)} may run on fewer CPUs than asked: {text}",
                        "Slurm gave fewer CPUs than --cpus-per-task: with two hardware threads per core, "
                        "slurm.threads_per_core: 1 (whole cores), or ask the admins about the node's CpuBind"))
        elif unbound:
            out.append((WARN, head + f"{_compact(unbound)} not bound: each may run on all "
                                     f"{mine[unbound[0]]['node_cpus']} CPUs of its node ({text})",
                        "TaskPlugin above: without binding, keep workers.<kind>.torch_threads at most cpus_per_task"))
        elif shared and not g.overcommit:
            out.append((WARN, head + f"bound, but tasks share CPUs: {'; '.join(shared[:4])}",
                        "two tasks on one node share the CPUs Slurm bound them to (overcommit, or nodes declaring "
                        "more CPUs than they have): they run at half speed each"))
        else:
            more = any(len(f["cpus"]) > asked for f in mine.values())
            out.append((OK, head + f"bound to {text}" + ("; more than asked: the hardware threads of whole cores"
                                                          if more else ""), ""))
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
            out.append((FAIL, head + f"{_compact(failed)} on device cuda cannot take a GPU: {why}",
                        f"give the group GPUs (slurm.{g.name}.gpus_per_node, at most one CUDA worker per GPU), a CUDA "
                        f"build of torch where the workers run, or slurm.{g.name}.share_gpu: true"))
            continue
        crowded = [(gpu, names) for gpu, names in by_gpu.items() if len(names) > 1 and set(names) & set(cuda)]
        share = getattr(exp.slurm, g.name).share_gpu
        if crowded and not share:
            gpu, names = crowded[0]
            out.append((FAIL, head + f"{', '.join(names)} would use one physical GPU ({gpu})",
                        f"give each CUDA worker its own GPU (slurm.{g.name}.gpus_per_node, tasks_per_node), or "
                        f"slurm.{g.name}.share_gpu: true if they may share"))
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
        low = [(n, f["nofile"]) for n, f in mine.items()
               if f["nofile"]["hard"] is not None and f["nofile"]["hard"] < f["nofile"]["needed"]]
        if low:
            n, lim = max(low, key=lambda item: item[1]["needed"])
            out.append((FAIL, f"group {g.name}: " + limits.too_few_files(n, lim["needed"], lim["workers"], lim["hard"]),
                        "raise the hard open-files limit on the nodes (the cluster's admins), or give each server "
                        "fewer clients (more policy workers or trainers)"))
            continue
        text = _by_value(g, mine, lambda f: f"soft {limit_text(f['nofile']['soft'])}, "
                                            f"hard {limit_text(f['nofile']['hard'])}")
        worst = max(mine, key=lambda n: mine[n]["nofile"]["needed"])
        need = mine[worst]["nofile"]["needed"]
        raised = any(f["nofile"]["soft"] is not None and f["nofile"]["soft"] < f["nofile"]["needed"]
                     for f in mine.values())
        out.append((OK, f"group {g.name}: open files {text}; the most a worker here needs is about {need} ({worst})"
                        + ("; the workers raise their soft limit to the hard one at start" if raised else ""), ""))
    return out


def judge_rendezvous(plan: planning.Plan, found: dict) -> Result:
    results = found["results"]
    errors = {n: r["rendezvous"]["error"] for n, r in results.items() if (r.get("rendezvous") or {}).get("error")}
    if errors:
        n, why = next(iter(errors.items()))
        return FAIL, f"file rendezvous in the probe directory: {_compact(errors)} gave up: {why}", \
            "every node must see the run directory (a shared filesystem) and every task must start: the logs of " \
            "those named say why"
    if not results:
        return FAIL, "file rendezvous: no task got that far", "the tasks' logs say why"
    slowest = max(r["rendezvous"]["seconds"] for r in results.values() if r.get("rendezvous"))
    return OK, f"file rendezvous in the probe directory (shared filesystem): all {len(results)} tasks met within " \
               f"{slowest:.1f} s", ""


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
        for b in groups[i + 1:]:
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
                out.append((FAIL, head + "; ".join(failures[:4]) + (f" (and {len(failures) - 4} more)"
                                                                     if len(failures) > 4 else ""),
                            f"the nodes of the two groups must reach each other on {network.SETTING}'s addresses "
                            f"(a firewall between partitions: slurm.ports for a range the site opens; or an interface "
                            f"one side lacks)"))
            elif unmeasured:
                out.append((FAIL, head + "not measured: " + "; ".join(unmeasured), "the logs of those named say why"))
            else:
                out.append((OK, head + f"every task answered ({', '.join(asked)}), slowest round trip "
                                       f"{max(times):.1f} ms", ""))
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
        out.append((FAIL, f"gloo all-reduce: {_compact(missing)} did not take part"
                          + (f": {next(w for w in why if w)}" if any(why) else " (never got past the rendezvous)"),
                    "their logs say why"))
    for peers, _ in groups.items():
        where = ", ".join(f"{p} on {facts.get(p, {}).get('node', '?')}" for p in peers)
        interface = next((facts[p]["address"]["interface"] for p in peers
                          if facts.get(p, {}).get("address")), None)
        gloo = {p: (results.get(p) or {}).get("collective", {}).get("gloo") or {"error": "no result"} for p in peers}
        bad = {p: r["error"] for p, r in gloo.items() if "error" in r}
        head = f"gloo all-reduce among {len(peers)} trainer task(s) ({where})"
        if bad:
            p, why = next(iter(bad.items()))
            out.append((FAIL, f"{head}: {p}: {why}",
                        f"the trainers' nodes must reach each other on {network.SETTING}'s interface "
                        f"(GLOO_SOCKET_IFNAME is set to it), and the first trainer's store port (within slurm.ports, "
                        f"if set) must be open"))
        else:
            slowest = max(r["seconds"] for r in gloo.values())
            out.append((OK, f"{head}" + (f" over {interface}" if interface else "") +
                            f": the sum is right on every rank, within {slowest:.2f} s", ""))
        nccl = {p: (results.get(p) or {}).get("collective", {}).get("nccl") for p in peers}
        devices = {facts.get(p, {}).get("device", "cpu") for p in peers}
        if all(v is None for v in nccl.values()):
            if any(d.startswith("cuda") for d in devices):
                out.append((FAIL, f"NCCL among {', '.join(peers)}: not tried: not every one of them has a GPU it can "
                                  "take (the GPU lines above)",
                            "give each trainer a GPU (slurm.trainer.gpus_per_node)"))
            else:
                out.append((OK, "NCCL: not needed: the trainers run on cpu (gloo, above, is what their DDP uses)", ""))
            continue
        skipped = next((r["skipped"] for r in nccl.values() if r and "skipped" in r), None)
        bad = {p: r["error"] for p, r in nccl.items() if r and "error" in r}
        if skipped:
            out.append((WARN, f"NCCL among {', '.join(peers)}: {skipped}", "give each trainer its own GPU for NCCL"))
        elif bad:
            p, why = next(iter(bad.items()))
            out.append((FAIL, f"NCCL all-reduce among {', '.join(peers)}: {p}: {why}",
                        f"NCCL_SOCKET_IFNAME is {network.SETTING}'s interface; NCCL_DEBUG=INFO in slurm.env shows "
                        f"which transport failed"))
        else:
            slowest = max(r["seconds"] for r in nccl.values() if r)
            out.append((OK, f"NCCL all-reduce among {len(peers)} trainer GPU(s): the sum is right on every rank, "
                            f"within {slowest:.2f} s", ""))
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
        return FAIL, f"{head}: {_compact(failed)}: {why}", RANKS_FIX
    if hung:
        return FAIL, f"{head}: {_compact(hung)} never finished it (within {tasks.MPI_BOUND:.0f} s; their logs hold " \
                     f"the stack where they waited)", RANKS_FIX
    if absent:
        return FAIL, f"{head}: not reached by {_compact(absent)}", "their logs say why"
    done = [s for s in states.values() if s]
    ranks = {s.get("ranks") for s in done}
    return OK, f"{head}: all {len(names)} tasks in one world ({done[0].get('library', '?')}), within " \
               f"{max(s['seconds'] for s in done):.1f} s" + ("" if ranks == {len(names)} else f" (ranks {ranks})"), ""


def judge_found(plan: planning.Plan, exp: config.Experiment, found: dict, binds: bool | None = None) -> list[Result]:
    """Every judgement of what the tasks wrote (srl_hpc.probe.collect), in the order they are printed."""
    return [*judge_addresses(plan, exp.slurm.network, found["facts"]), *judge_cpus(plan, found["facts"], binds),
            *judge_gpus(plan, exp, found["facts"]), *judge_nofile(plan, found["facts"]),
            judge_rendezvous(plan, found), *judge_pings(plan, found), *judge_collectives(plan, exp, found),
            judge_mpi(plan, found)]

