# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this line)
"""`srl-trace`: offline analysis of a run's HDF5 traces, for a login node after (or during) the run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from argcomplete.completers import DirectoriesCompleter

from srl_hpc.completion import complete
from srl_hpc.trace import analysis, learning, report
from srl_hpc.trace.reader import TraceError, read_run
from srl_hpc.trace.report import ReportError

USAGE = """\
srl-trace [summary] RUN_DIR [--json] [--plot DIR]   summary of one run
srl-trace compare RUN_A RUN_B [--json]              two runs side by side
srl-trace report SWEEP [--reference ENV=LOW:HIGH]   a sweep's IQM and confidence intervals over seeds, plots
srl-trace --version
"""
COMMANDS = ("summary", "compare", "report")
RUN_DIRS = DirectoriesCompleter()


def main(argv=None) -> int:
    complete(_parser, COMMANDS, default="summary")  # the shell's completion hook: answers and exits
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        from srl_hpc import __version__

        print(f"srl-trace {__version__}")
        return 0
    try:
        if argv and argv[0] == "compare":
            return cmd_compare(argv[1:])
        if argv and argv[0] == "report":
            return cmd_report(argv[1:])
        if argv and argv[0] == "summary":  # (explicit: a run directory may be called "compare")
            return cmd_summary(argv[1:])
        return cmd_summary(argv)
    except (TraceError, ReportError) as e:
        print(f"srl-trace: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `srl-trace RUN | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser() -> argparse.ArgumentParser:
    """Both commands' parsers under one, for shell completion (`srl-trace RUN` means `summary`, which a parser's
    subcommands cannot say: main dispatches)."""
    top = argparse.ArgumentParser(prog="srl-trace", usage=USAGE)
    top.add_argument("--version", action="store_true", help="print the installed version")
    commands = top.add_subparsers(metavar="COMMAND")
    # the first word may be a run directory: its summary
    commands.completer = RUN_DIRS  # type: ignore[attr-defined]
    for name, build in (("summary", _summary_parser), ("compare", _compare_parser), ("report", _report_parser)):
        commands.add_parser(name, parents=[build()], add_help=False)
    return top


def _summary_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-trace", usage=USAGE, description="Summarize a run's traces.")
    p.add_argument("run_dir", help="run directory (holds traces/*.h5)").completer = RUN_DIRS  # type: ignore[attr-defined]
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--plot", metavar="DIR", help="also write PNG figures to DIR").completer = RUN_DIRS  # type: ignore[attr-defined]
    return p


def cmd_summary(argv) -> int:
    args = _summary_parser().parse_args(argv)
    run = read_run(args.run_dir)
    summary = analysis.summarize(run)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    if args.plot:
        from srl_hpc.trace.plots import write_plots  # matplotlib is slow to import; only when asked

        paths = write_plots(run, summary, args.plot)
        print(
            f"wrote {len(paths)} figures to {args.plot}: {', '.join(p.name for p in paths)}",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0


def _compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-trace compare", usage=USAGE, description="Two runs side by side.")
    p.add_argument("run_a").completer = RUN_DIRS  # type: ignore[attr-defined]
    p.add_argument("run_b").completer = RUN_DIRS  # type: ignore[attr-defined]
    p.add_argument("--json", action="store_true", help="print both summaries as JSON {a, b}")
    return p


def cmd_compare(argv) -> int:
    args = _compare_parser().parse_args(argv)
    a, b = (analysis.summarize(read_run(d)) for d in (args.run_a, args.run_b))
    print(json.dumps({"a": a, "b": b}, indent=2) if args.json else format_compare(a, b))
    return 0


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-trace report",
        usage=USAGE,
        description="A sweep's scores over seeds: "
        "IQM, mean, median and optimality gap with stratified bootstrap 95% intervals and "
        "performance profiles (rliable), for the final score and the area under the curve.",
    )
    p.add_argument("sweep_dir", help="a sweep directory (holds sweep.json)").completer = RUN_DIRS  # type: ignore[attr-defined]
    p.add_argument(
        "--score",
        choices=("auto", "train", "eval"),
        default="auto",
        help="the evaluation workers' mean return (eval), the training mean return (train), or eval "
        "where every member has one (auto)",
    )
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="ENV=LOW:HIGH",
        help="normalise ENV's scores to (score - LOW) / (HIGH - LOW), e.g. random and human scores; "
        "repeatable, one per task",
    )
    p.add_argument(
        "--target",
        type=float,
        help="the optimality gap's target without --reference (default: the experiment's stop.target_return)",
    )
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    p.add_argument("--reps", type=int, default=report.BOOTSTRAP_REPS, help="bootstrap resamples")
    p.add_argument("--out", help="where report.json and the figures go (default: SWEEP/report)").completer = RUN_DIRS  # type: ignore[attr-defined]
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def cmd_report(argv) -> int:
    args = _report_parser().parse_args(argv)
    references = {}
    for word in args.reference:
        env, _, bounds = word.partition("=")
        low, _, high = bounds.partition(":")
        try:
            references[env] = (float(low), float(high))
        except ValueError:
            raise ReportError(f"--reference {word!r}: expected ENV=LOW:HIGH, e.g. ALE/Pong-v5=-20.7:14.6") from None
        if references[env][0] == references[env][1]:
            raise ReportError(f"--reference {word!r}: LOW and HIGH must differ")
    out = Path(args.out) if args.out else Path(args.sweep_dir) / "report"
    r = report.report(Path(args.sweep_dir), args.score, references, args.target, args.seed, args.reps)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(r, indent=2))
    paths = report.write_plots(r, out, references)
    print(json.dumps(r, indent=2) if args.json else report.format_report(r))
    print(
        f"wrote {out / 'report.json'} and {len(paths)} figures: {', '.join(p.name for p in paths)}",
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


# ----------------------------------------------------------------------------------------------- text


def format_summary(s: dict) -> str:
    lines = [f"run {s['run_dir']}" + (f"  ({s['experiment']})" if s["experiment"] else "")]
    if s["status"]:
        lines.append(f"  ended {s['status']}: {s['reason']}")
    if s["no_final_report"]:
        lines.append(f"  no final report from {', '.join(s['no_final_report'])}: their traces end at their last flush")
    lines.append(f"  {len(s['workers'])} workers' traces read, {s['traced_seconds']:.1f} s traced")
    if s["attempts"] > 1:
        lines.append(
            f"  {s['attempts']} attempts (a resumed run), read as one: time shares count the gaps "
            f"between attempts as 'other'"
        )
    if s["restarts"]:
        lines.append(
            "  restarted workers (each read as one trace): "
            + ", ".join(f"{name} x{n}" for name, n in s["restarts"].items())
        )
    if s["problems"]:
        lines += ["", "PROBLEMS (files or tables not read; the rest is analysed)"]
        lines += [f"  {p['file']}: {p['reason']}" for p in s["problems"]]
    notes = [f"  {w['name']} ({w['file']}): {n}" for w in s["workers"] for n in w["notes"]]
    if notes:
        lines += ["", "notes"] + notes

    lines += ["", "throughput"]
    for kind, t in s["throughput"].items():
        per = "" if t["workers"] < 2 else "  (" + ", ".join(f"{w} {v:,.0f}" for w, v in t["per_worker"].items()) + ")"
        lines.append(
            f"  {analysis.KIND_LABELS[kind]:<15}{t['workers']:>3} worker{'s' if t['workers'] > 1 else ' '}"
            f"{t['per_second']:>12,.0f} {t['unit']}/s{per}"
        )

    lines += _frames_lines(s.get("frames"))

    lines += ["", "where each worker's time goes (share of its traced span)"]
    policies = {w["name"]: f" ({w['policy']})" for w in s["workers"] if w["policy"]}
    width = max((len(n + policies.get(n, "")) for n in s["time_shares"]["by_worker"]), default=0) + 1
    for name, shares in s["time_shares"]["by_worker"].items():
        if shares:
            lines.append(
                f"  {name + policies.get(name, ''):<{max(width, 11)}}"
                + "  ".join(f"{analysis.ACTIVITY_LABELS[k]} {_pct(v)}" for k, v in shares.items())
            )
    if s["trainer_busy_fraction"] is not None:
        lines.append(f"  trainer busy fraction (computing + publishing): {_pct(s['trainer_busy_fraction'])}")

    lines += ["", f"  {'latency (ms)':<30}{'n':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
    for stats in s["latency"].values():
        if stats["n"]:
            lines.append(
                f"  {stats['label']:<30}{stats['n']:>10,}"
                + "".join(f"{stats[k] * 1e3:>10.3f}" for k in ("p50", "p90", "p99", "max"))
            )

    b = s["batch_size"]
    if b["n"]:
        lines += ["", f"inference batch size: {_stats(b)} over {b['n']:,} batches", "  " + _hist(b["histogram"])]
    lag = s["policy_lag"]
    if lag["n"]:
        lines += [
            "",
            f"policy lag at the trainer (versions): {_stats(lag)}; "
            f"{lag['dropped']:,} of {lag['segments']:,} segments dropped as too stale",
            "  " + _hist(lag["histogram"]),
        ]
    for name, r in s["returns_by_policy"].items() or [("", s["returns"])]:
        if r["episodes"]:
            n = min(learning.RETURN_WINDOW, r["episodes"])
            lines += [
                "",
                f"episode return{' of policy ' + name if name else ''}: {r['episodes']:,} episodes; mean of "
                f"the first {n} {r['first']:.1f}, of the last {n} {r['last']:.1f}",
                "  "
                + " | ".join(
                    f"{b['start']:.0f}-{b['end']:.0f}s {b['mean_return']:.1f}"
                    for b in r["over_time"]
                    if b["mean_return"] is not None
                ),
            ]
    e = s["evaluation"]
    if e["rounds"]:
        shown = e["all"][:: max(1, len(e["all"]) // 10)][:10]  # about ten rounds across the run
        lines += [
            "",
            f"evaluation: {e['rounds']} rounds; last: version {e['last']['version']} mean return "
            f"{e['last']['mean_return']:.1f}; best: version {e['best']['version']} "
            f"{e['best']['mean_return']:.1f}",
            "  " + " | ".join(f"{r['t']:.0f}s v{r['version']} {r['mean_return']:.1f}" for r in shown),
        ]
    lines += _ratings_lines(s.get("ratings", {}))
    copies = s.get("population", {}).get("copies")
    if copies:
        shown = copies[-10:]
        lines += [
            "",
            f"population: {len(copies)} copies in {copies[-1]['round']} rounds"
            + ("; the last 10:" if len(copies) > 10 else ":"),
        ]
        lines += [
            f"  {c['t']:.0f}s round {c['round']}: {c['target']} copied {c['source']}"
            + "".join(f", {k} {v:.3g}" for k, v in c["values"].items())
            for c in shown
        ]
    v = s["verdict"]
    lines += [
        "",
        "VERDICT: unknown" if v["stage"] == "unknown" else f"VERDICT: {v['stage']}-bound",
        f"  {v['evidence']}",
    ]
    return "\n".join(lines)


def _frames_lines(f: dict | None) -> list[str]:
    if not f:
        return []
    line = f"  sent {f['sent']:,}, received {f['received']:,}"
    if f["consumed"] is not None:
        line += f" = trained {f['consumed']:,} + dropped {f['dropped']:,}"
    lines = ["", "frames (as the traces record them)", line]
    if f["incomplete"]:
        lines.append(f"  {', '.join(f['incomplete'])}: traces end at their last flush (killed?): lower bounds")
    if f["mismatches"]:
        lines += [f"  MISMATCH: {m}" for m in f["mismatches"]]
    elif not f["incomplete"]:
        lines.append("  every frame sent was received, and every one received was trained or dropped")
    if f["checked_against_summary"] and not f["mismatches"]:
        lines.append("  as the workers counted them (summary.json)")
    return lines


def _ratings_lines(r: dict) -> list[str]:
    """Self-play: games by opponent, and the rating workers' last Elo (the fixed players by name)."""
    from srl_hpc.envs.fixed_players import FIXED_PLAYERS
    from srl_hpc.population.opponents import FIXED, fixed_name

    lines = []
    if r.get("games"):
        games = r["games"]
        newest, total = games.get(-1, 0), sum(games.values())
        fixed: dict[str, int] | list[str]
        fixed = {fixed_name(v): n for v, n in games.items() if v <= FIXED}
        stored = {v: n for v, n in games.items() if v >= 0}
        lines += [
            "",
            f"self-play: {total:,} games of the learner; against the newest weights {newest:,}, "
            f"against {len(stored)} stored versions {sum(stored.values()):,}"
            + "".join(f", against the {name} player {n:,}" for name, n in fixed.items()),
        ]
    if r.get("rounds"):
        elo = r["elo"]
        names = list(FIXED_PLAYERS)  # the rating table numbers them -1, -2, ... (srl_hpc/handlers/rating.py)
        fixed = [f"{names[-1 - v]} {e:.0f}" for v, e in elo.items() if v < 0 and -1 - v < len(names)]
        versions = sorted(v for v in elo if v >= 0)
        best = max(versions, key=elo.get)
        lines += [
            "",
            f"ratings (Elo, random 0) after {r['rounds']} rounds: best version {best} {elo[best]:.0f}; "
            f"fixed players: {', '.join(fixed)}",
            "  " + " | ".join(f"v{v} {elo[v]:.0f}" for v in versions[:: max(1, len(versions) // 10)]),
        ]
    return lines


def format_compare(a: dict, b: dict) -> str:
    rows: list[tuple[Any, ...]] = [
        ("run (A, B)", a["run_dir"], b["run_dir"]),
        ("experiment", a["experiment"], b["experiment"]),
        ("status", a["status"], b["status"]),
        ("traced seconds", f"{a['traced_seconds']:.1f}", f"{b['traced_seconds']:.1f}"),
        ("trace problems", len(a["problems"]), len(b["problems"])),
    ]
    for kind, (unit, *_) in analysis.THROUGHPUT.items():
        rates = (_num(s["throughput"].get(kind, {}).get("per_second")) for s in (a, b))
        rows.append((f"{analysis.KIND_LABELS[kind]}: {unit}/s", *rates))
    rows.append(("trainer busy", *(_pct(s["trainer_busy_fraction"]) for s in (a, b))))
    for kind in analysis.ACTIVITIES:
        for activity, *_ in analysis.ACTIVITIES[kind]:
            rows.append(
                (
                    f"{kind}: {analysis.ACTIVITY_LABELS[activity]}",
                    *(_pct((s["time_shares"]["by_kind"][kind] or {}).get(activity)) for s in (a, b)),
                )
            )
    for stage, stats in a["latency"].items():
        rows.append((f"{stats['label']} p50/p99 ms", *(_p50_p99(s["latency"][stage]) for s in (a, b))))
    rows += [
        ("batch size mean", *(_num(s["batch_size"]["mean"], ".1f") for s in (a, b))),
        (
            "policy lag mean / max",
            *(f"{_num(s['policy_lag']['mean'], '.1f')} / {_num(s['policy_lag']['max'])}" for s in (a, b)),
        ),
        ("episodes", *(_num(s["returns"]["episodes"]) for s in (a, b))),
        ("return, last episodes", *(_num(s["returns"].get("last"), ".1f") for s in (a, b))),
        ("verdict", a["verdict"]["stage"], b["verdict"]["stage"]),
    ]
    rows = [(label, "-" if x is None else str(x), "-" if y is None else str(y)) for label, x, y in rows]
    width = max(len(x) for _, x, _ in rows) + 2
    lines = [f"{label:<40}{x:<{width}}{y}" for label, x, y in rows]
    return "\n".join(lines + ["", f"A: {a['verdict']['evidence']}", f"B: {b['verdict']['evidence']}"])


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _p50_p99(stats: dict) -> str:
    return "-" if not stats["n"] else f"{stats['p50'] * 1e3:.3g} / {stats['p99'] * 1e3:.3g}"


def _stats(st: dict) -> str:
    return f"mean {st['mean']:.1f}, p50 {st['p50']:g}, p90 {st['p90']:g}, p99 {st['p99']:g}, max {st['max']:g}"


def _hist(buckets: list[dict]) -> str:
    return "  ".join(f"{h['bucket']}: {h['count']:,}" for h in buckets if h["count"])


if __name__ == "__main__":
    sys.exit(main())
