#!/usr/bin/env bash
# Create the two virtualenvs the side-by-side benchmark runs the baseline systems in:
#
#   bash benchmarks/baselines/setup.sh            # both
#   bash benchmarks/baselines/setup.sh rllib      # only one (sample_factory | rllib)
#
#   benchmarks/.venvs/sample_factory : sample-factory 2.1.1 (APPO), gymnasium[mujoco] 0.29.1, numpy 1.26.4,
#                                      ale-py 0.9.0, opencv-python, mujoco 3.3.0
#   benchmarks/.venvs/rllib          : ray[rllib] 2.60.0, gymnasium[mujoco] 1.2.2, ale-py 0.12.1, opencv-python,
#                                      mujoco 3.3.0
#
# mujoco==3.3.0 is the version our own venv runs HalfCheetah with. gymnasium 0.29.1 (the newest Sample Factory
# 2.1.1 accepts) registers HalfCheetah up to -v4, not -v5; its runner uses -v4 there (the same model, reward and
# frame skip as -v5; see sample_factory_run.py).
#
# Both pin torch==2.13.0 (the CPU wheel on this machine's disk; any other version would download GBs of
# CUDA wheels). Idempotent: a venv whose packages already import at the pinned versions is skipped.
# PYTHON=... selects the interpreter the venvs are made from (default python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venvs="$(cd "$here/.." && pwd)/.venvs"
python="${PYTHON:-python3}"
torch_pin="torch==2.13.0"
systems=("${@:-sample_factory rllib}")
systems=(${systems[*]})

sf_pkgs=("$torch_pin" "sample-factory==2.1.1" "gymnasium[mujoco]==0.29.1" "numpy==1.26.4" "ale-py==0.9.0" "opencv-python"
          "mujoco==3.3.0")
sf_check='import sample_factory, torch, gymnasium, numpy, ale_py, cv2, mujoco
assert mujoco.__version__ == "3.3.0", mujoco.__version__
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert gymnasium.__version__ == "0.29.1", gymnasium.__version__
assert numpy.__version__ == "1.26.4", numpy.__version__
print("sample_factory", getattr(sample_factory, "__version__", "2.1.1"), "torch", torch.__version__,
      "gymnasium", gymnasium.__version__, "numpy", numpy.__version__, "ale_py", ale_py.__version__, "mujoco", mujoco.__version__)'

rl_pkgs=("$torch_pin" "ray[rllib]==2.60.0" "gymnasium[mujoco]==1.2.2" "ale-py==0.12.1" "opencv-python" "mujoco==3.3.0")
rl_check='import ray, ray.rllib, torch, gymnasium, numpy, ale_py, cv2, mujoco
assert mujoco.__version__ == "3.3.0", mujoco.__version__
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert ray.__version__ == "2.60.0", ray.__version__
print("ray", ray.__version__, "torch", torch.__version__, "gymnasium", gymnasium.__version__,
      "numpy", numpy.__version__, "ale_py", ale_py.__version__, "mujoco", mujoco.__version__)'

setup_one() {  # name check pkgs...
    local name="$1" check="$2"; shift 2
    local dir="$venvs/$name"
    if [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c "$check" >/dev/null 2>&1; then
        echo "[setup] $name: ready ($("$dir/bin/python" -c "$check" 2>/dev/null)), skipped"
        return 0
    fi
    local t0=$SECONDS
    echo "[setup] $name: creating $dir"
    mkdir -p "$venvs"
    [[ -x "$dir/bin/python" ]] || "$python" -m venv "$dir"
    echo "[setup] $name: pip install $*"
    "$dir/bin/pip" install --disable-pip-version-check --progress-bar off "$@" 2>&1 \
        | grep -E --line-buffered '^(Collecting|Successfully|ERROR|error)' | sed -u "s/^/[setup] $name: /" || true
    if ! "$dir/bin/python" -c "$check"; then
        echo "[setup] $name: FAILED: its packages do not import at the pinned versions (see above)" >&2
        return 1
    fi
    echo "[setup] $name: done in $((SECONDS - t0)) s, $(du -sh "$dir" | cut -f1) on disk"
}

status=0
for s in "${systems[@]}"; do
    case "$s" in
        sample_factory) setup_one sample_factory "$sf_check" "${sf_pkgs[@]}" || status=1 ;;
        rllib) setup_one rllib "$rl_check" "${rl_pkgs[@]}" || status=1 ;;
        *) echo "[setup] unknown system '$s' (choose sample_factory or rllib)" >&2; status=2 ;;
    esac
done
exit $status
