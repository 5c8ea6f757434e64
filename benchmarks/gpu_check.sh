#!/usr/bin/env bash
# The GPU paths in one short script: CUDA inference (fp32 and bf16), the CUDA trainer with its pinned-memory
# side-stream pre-fetch, two DDP trainers, SEED inference on the trainer's GPU, and Pong on GPU vs CPU
# on the same machine. Each case is a real local run; the figures come from its summary.json and
# srl-trace's report. Run it on a machine with a GPU:
#     bash benchmarks/gpu_check.sh [OUT_DIR]        (DEVICE=cpu WALL=20 for a dry pass on a CPU machine)
# Prints one line per case and writes OUT_DIR/gpu_check.json and OUT_DIR/gpu_check.log.
set -u
out=${1:-gpu_check_out}
device=${DEVICE:-cuda}
wall=${WALL:-50}
pong_wall=${PONG_WALL:-75}
mkdir -p "$out"
log="$out/gpu_check.log"
runs=$(mktemp -d)
py=${PYTHON:-python3}

{
  echo "== machine"; nproc; (nvidia-smi -L || true)
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
  $py - <<'EOF'
# GPU pick by node-local rank: every rank maps onto a visible device
import torch
from srl_hpc.models import resolve_device
if torch.cuda.is_available():
    print("resolve_device by local rank:", [str(resolve_device("cuda", r)) for r in range(4)])
EOF
} >>"$log" 2>&1

case_run() {  # name, timeout, experiment, --set overrides...
  local name=$1 limit=$2 experiment=$3; shift 3
  local sets=() kv
  for kv in "$@"; do sets+=(--set "$kv"); done
  local t0=$SECONDS
  echo "== $name: $experiment $*" >>"$log"
  timeout --signal=INT "$limit" $py -m launcher.cli "$experiment" --run-dir "$runs/$name" "${sets[@]}" >>"$log" 2>&1
  local rc=$?
  echo "rc=$rc wall=$((SECONDS - t0))s" >>"$log"
  $py -m srl_hpc.trace.cli "$runs/$name" >>"$log" 2>&1 || true
  cp "$runs/$name/summary.json" "$out/$name.summary.json" 2>/dev/null || echo "{}" >"$out/$name.summary.json"
}

dev="workers.policy.device=$device workers.trainer.device=$device"
cp_stop="stop.wall_time=$wall"
# shellcheck disable=SC2086  # $dev is two overrides on purpose
case_run cartpole_fp32 $((wall + 60)) experiments/cartpole_ppo.yaml $dev $cp_stop
case_run cartpole_bf16 $((wall + 60)) experiments/cartpole_ppo.yaml $dev $cp_stop \
  workers.policy.precision=bf16 workers.trainer.precision=bf16
case_run cartpole_ddp2 $((wall + 60)) experiments/cartpole_ppo.yaml $dev $cp_stop workers.trainer.count=2
case_run cartpole_seed $((wall + 60)) experiments/cartpole_ppo.yaml $dev $cp_stop workers.placement=seed \
  workers.policy.count=0
pong="workers.actor.count=12 workers.trainer.torch_threads=2 stop.wall_time=$pong_wall"
case_run pong_gpu $((pong_wall + 60)) experiments/atari_pong_ppo.yaml $dev $pong workers.policy.max_batch=96
case_run pong_cpu $((pong_wall + 60)) experiments/atari_pong_ppo.yaml $pong workers.policy.max_batch=96

$py - "$out" <<'EOF' | tee -a "$log"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.summary.json")):
    s = json.loads(f.read_text() or "{}")
    keep = ("status", "reason", "wall_time", "env_frames", "frames_consumed", "frames_dropped",
            "policy_version", "mean_return", "failed_workers")
    row = {k: s[k] for k in keep if k in s}
    if s.get("wall_time"):
        row["fps"] = round(s["env_frames"] / s["wall_time"])
    rows[f.name.removesuffix(".summary.json")] = row
for name, r in rows.items():
    print(name, json.dumps(r))
(out / "gpu_check.json").write_text(json.dumps(rows, indent=1))
EOF
rm -rf "$runs"
