"""srl-trace report (srl_hpc/trace/report.py): a sweep's scores, estimated by rliable, from the members' files.
The members here are written by hand (their metrics.csv), so the expected numbers are known."""

import json

import numpy as np
import pytest
from scipy import stats

from srl_hpc.trace import report
from srl_hpc.trace.cli import main

FINAL = {
    "algorithm.lr=1e-3": [480.0, 500.0, 220.0, 495.0, 470.0],
    "algorithm.lr=3e-4": [300.0, 350.0, 500.0, 90.0, 310.0],
}


def write_sweep(root, finals=FINAL, env="CartPole-v1", target=475):
    """A sweep directory whose members' metrics.csv end at `finals`; each curve rises linearly from 0."""
    members = []
    for config, values in finals.items():
        for seed, final in enumerate(values, start=1):
            run = root / config / f"seed-{seed}"
            run.mkdir(parents=True)
            (run / "experiment.yaml").write_text(
                f"name: s\nseed: {seed}\nenv: {{id: {env}}}\nstop: {{target_return: {target}}}\n"
            )
            rows = ["wall_time,env_frames,mean_return,eval_return"]
            rows += [f"{i},{i * 1000},{final * i / 10}," for i in range(11)]
            (run / "metrics.csv").write_text("\n".join(rows) + "\n")
            members.append({"config": config, "overrides": [config], "seed": seed, "run_dir": str(run)})
    (root / "sweep.json").write_text(
        json.dumps({"experiment": "s", "command": "srl-launch x.yaml --sweep ...", "members": members})
    )
    return root


def test_the_estimates_are_rliables_on_the_same_scores(tmp_path):
    from rliable import library, metrics

    r = report.report(write_sweep(tmp_path / "sweep"), reps=500, seed=7)
    assert r["score"] == "training mean return" and r["tasks"] == ["CartPole-v1"] and r["seeds"] == [1, 2, 3, 4, 5]
    assert r["optimality_gap_to"] == 475  # the experiment's target
    scores = {k: np.array(v, dtype=float)[:, None] for k, v in FINAL.items()}  # 5 runs x 1 task

    def aggregate(x):
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_median(x),
                metrics.aggregate_optimality_gap(x, 475),
            ]
        )

    np.random.seed(7)  # (rliable resamples from numpy's global generator)
    points, intervals = library.get_interval_estimates(scores, aggregate, reps=500)
    for name in FINAL:
        got = r["configurations"][name]["final"]
        for i, stat in enumerate(report.STATISTICS):
            assert got[stat]["value"] == pytest.approx(points[name][i])
            assert [got[stat]["low"], got[stat]["high"]] == pytest.approx(list(intervals[name][:, i]))
        # and the IQM is what it says: the mean of the middle half (25% trimmed from each end)
        assert got["iqm"]["value"] == pytest.approx(stats.trim_mean(FINAL[name], 0.25))
        # a straight line from 0: its area under the curve over the run's frames is half its end
        assert r["configurations"][name]["auc"]["mean"]["value"] == pytest.approx(np.mean(FINAL[name]) / 2)


def test_reference_scores_normalise_and_the_gap_is_to_one(tmp_path):
    r = report.report(write_sweep(tmp_path / "sweep"), references={"CartPole-v1": (0.0, 500.0)}, reps=200)
    assert r["optimality_gap_to"] == 1.0
    mean = r["configurations"]["algorithm.lr=1e-3"]["final"]["mean"]["value"]
    assert mean == pytest.approx(np.mean(FINAL["algorithm.lr=1e-3"]) / 500)


def test_the_cli_writes_the_table_the_json_and_readable_figures(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep")
    assert main(["report", str(sweep), "--reps", "200"]) == 0
    out = capsys.readouterr().out
    assert "2 configurations, 10 runs (seeds 1, 2, 3, 4, 5) on CartPole-v1" in out
    assert "made by: srl-launch x.yaml --sweep ..." in out and "optimality gap to 475" in out
    lines = [line for line in out.splitlines() if line.strip().startswith("algorithm.lr=1e-3")]
    assert len(lines) == 2 and lines[0].split()[1] == f"{stats.trim_mean(FINAL['algorithm.lr=1e-3'], 0.25):.4g}"
    written = json.loads((sweep / "report" / "report.json").read_text())
    assert set(written["configurations"]) == set(FINAL)
    for name in ("intervals-final.png", "intervals-auc.png", "profiles.png"):
        png = (sweep / "report" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_what_cannot_be_reported_is_named(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a sweep directory (no sweep.json" in capsys.readouterr().err
    uneven = dict(FINAL, **{"algorithm.lr=3e-4": [1.0, 2.0]})
    assert main(["report", str(write_sweep(tmp_path / "uneven", uneven)), "--reference", "Pong=1:1"]) == 2
    assert "LOW and HIGH must differ" in capsys.readouterr().err
    uneven_report = report.report(tmp_path / "uneven", reps=10)  # configurations need not have the same seeds
    assert [x["config"] for x in uneven_report["runs"]].count("algorithm.lr=3e-4") == 2
    with pytest.raises(report.ReportError, match="not a task of this sweep"):
        report.report(write_sweep(tmp_path / "s"), references={"Pong": (0.0, 1.0)}, reps=10)
    with pytest.raises(report.ReportError, match="--score eval: not every member has evaluation returns"):
        report.report(tmp_path / "s", score="eval", reps=10)


def test_the_final_score_is_the_runs_end_from_its_summary(tmp_path):
    """A run that stops between progress rows: its end (summary.json) is the curve's last point."""
    sweep = write_sweep(tmp_path / "sweep")
    run = sweep / "algorithm.lr=1e-3" / "seed-1"  # its rows end at 10,000 frames and 480
    (run / "summary.json").write_text(json.dumps({"env_frames": 12000, "mean_return": 200.0}))
    scores = {(s["config"], s["seed"]): s for s in report.report(sweep, reps=10)["runs"]}
    first = scores[("algorithm.lr=1e-3", 1)]
    assert first["final"] == 200.0 and first["frames"] == 12000
    assert first["auc"] == pytest.approx((480 / 2 * 10000 + (480 + 200) / 2 * 2000) / 12000)
    assert scores[("algorithm.lr=1e-3", 2)]["final"] == 500.0  # no summary: the last row
