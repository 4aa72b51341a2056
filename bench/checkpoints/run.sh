#!/usr/bin/env bash
# Issue 41, point 4: ddp-train --checkpoint-every=auto (ddprun's checkpoint advice) against fixed
# intervals of 10, 50 and 200 steps, on effective training time, in a chaos run: 3 namespaced
# hosts x 2 ddp-train mnist workers against ddprun-rdzv (bench/chaos/chaos_soak.cc), a worker
# SIGKILLed after every CKPT_GAP seconds (default 30) of steady training, cold restarts (a failure
# goes back to the last checkpoint: what the interval trades against its saves). Each variant does
# the same work, one job of CKPT_STEPS steps (default 2500, epochs of 500; about 5 minutes here),
# under the same fault sequence (seed); the auto variant gets --rdzv-conf mtbf=CKPT_MTBF (default
# 30) as the advice's prior. Printed per variant: the agents' measured effective training time
# ratio and the job's wall time, and for auto the server's last advice with the ratio Daly's
# model predicts for it. Root only (network namespaces).
#   bench/checkpoints/run.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD_DIR=${1:-build}
OUT=${2:-/tmp/checkpoint-bench}
if [ "$(id -u)" -ne 0 ]; then echo "bench/checkpoints: skipped (needs root for network namespaces)"; exit 0; fi
mkdir -p "$OUT"
for variant in ${CKPT_VARIANTS:-auto 10 50 200}; do
  args=(--seconds 3600 --seed "${CKPT_SEED:-7}" --kinds kill_worker
        --fault-interval "${CKPT_GAP:-30}:${CKPT_GAP:-30}" --restart-mode cold
        --steps "${CKPT_STEPS:-2500}" --steps-per-epoch 500 --batch-size 16 --segments 1
        --checkpoint-every "$variant" --json "$OUT/$variant.json" --report "$OUT/report.md")
  if [ "$variant" = auto ]; then args+=(--mtbf "${CKPT_MTBF:-30}"); fi
  echo "== --checkpoint-every=$variant"
  # 1: a violation or an interrupted job; the JSON still says what was measured.
  "$BUILD_DIR/bin/chaos-soak" "${args[@]}" > "$OUT/$variant.log" 2>&1 || echo "   (exit $?: see $OUT/$variant.log)"
  /usr/bin/python3 - "$OUT/$variant.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ratio = r.get("effective_ratio_agents")
line = f"   faults {r['faults']}, steps {r['steps']} in {r['train_wall_s']:.0f} s, effective training time (agents' ledgers) " \
       f"{'n/a' if ratio is None else f'{100 * ratio:.1f} %'}, recomputed {r.get('recomputed')} steps"
a = r.get("advice")
if a:
    line += (f"; advice: every {a['interval_s']:.2f} s (MTBF {a['mtbf_s']:.1f} s, {a['failures']} failures, "
             f"save {a['save_s']:.3f} s, recovery {a['recovery_s']:.2f} s), predicted {100 * a['predicted_ratio']:.1f} %")
print(line)
PY
done
