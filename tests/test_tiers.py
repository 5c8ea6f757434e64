"""The test tiers (setup.cfg's markers): where no Slurm answers, the Slurm tier skips and says why, or, under
SRL_REQUIRE_SLURM=1 (make test, CI), stops the session. The Slurm commands are fakes first on PATH."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, slurm_unavailable

CONTROLLER_DOWN = 'echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2; exit 1'


def test_a_cluster_with_a_node_up_can_take_slurm_tests(fake_bin):
    fake_bin("sinfo", 'echo "down*"; echo "idle"')
    assert slurm_unavailable() is None


def test_no_controller_no_node_up_and_no_sinfo_each_say_why(fake_bin, tmp_path, monkeypatch):
    fake_bin("sinfo", CONTROLLER_DOWN)
    reason = slurm_unavailable()
    assert "sinfo failed (exit 1: slurm_load_partitions: Unable to contact slurm controller" in reason, reason
    fake_bin("sinfo", 'echo "down*"; echo "drained"; echo "idle*"')
    assert slurm_unavailable() == "Slurm answers but no node can run jobs (node states: down*, drained, idle*)"
    fake_bin("sinfo", "sleep 5")
    assert "sinfo did not answer within 0.5s" in slurm_unavailable(timeout=0.5)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin" / "sinfo").unlink()
    assert slurm_unavailable().startswith("sinfo is not on PATH")


def pytest_on(test_file, env: dict) -> subprocess.CompletedProcess:
    """pytest, with the project's settings and tests/conftest.py, on a test file outside tests/."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "setup.cfg"),
            "--rootdir",
            str(ROOT),
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-rs",
            str(test_file),
        ],
        env={**env, "PYTHONPATH": str(ROOT / "tests")},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_slurm_tier_skips_saying_why_unless_slurm_is_required(fake_bin, tmp_path):
    fake_bin("sinfo", CONTROLLER_DOWN)
    env = {k: v for k, v in os.environ.items() if k != "SRL_REQUIRE_SLURM"}
    one_slurm_test = tmp_path / "test_one.py"
    one_slurm_test.write_text("import pytest\n\n\n@pytest.mark.slurm\ndef test_on_slurm():\n    pass\n")
    skipped = pytest_on(one_slurm_test, env)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    assert "no Slurm cluster: sinfo failed (exit 1: slurm_load_partitions: Unable to contact" in skipped.stdout
    required = pytest_on(one_slurm_test, {**env, "SRL_REQUIRE_SLURM": "1"})
    assert required.returncode == 4, required.stdout + required.stderr  # pytest's usage error: nothing ran
    assert "SRL_REQUIRE_SLURM=1 but 1 Slurm tests cannot run: sinfo failed" in required.stderr + required.stdout
