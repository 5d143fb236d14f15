#!/usr/bin/env bash
# The checks that need a GPU: a few minutes on one. Everything goes under $OUT; each step
# runs whatever the ones before it did, and the script exits 1 if any failed.
# tests/device/README.md says what each step checks.
set -uo pipefail
: "${OUT:?set OUT to the folder the checks are to write into}"
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
mkdir -p "$OUT"
failed=()

step() {  # step NAME COMMAND...: stdout to $OUT/NAME.out, stderr to $OUT/NAME.err
    local name=$1 began=$SECONDS
    shift
    echo "== $name: $*"
    if "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; then
        echo "   ok ($((SECONDS - began)) s)"
    else
        echo "   FAILED (exit $?, $((SECONDS - began)) s): $OUT/$name.err"
        tail -n 5 "$OUT/$name.err" | sed 's/^/   | /'
        failed+=("$name")
    fi
}
steptrace() { "$PYTHON" -m harness.commands "$@"; }

step environment bash -c "nvidia-smi; $PYTHON -c 'import torch; print(torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name())'"

# 1. the kernel table of the small model's ops on this GPU
step calibrate steptrace calibrate --device cuda --model small --out "$OUT/kernels-small.csv" --json

# 2. the real forward on CUDA, tiny and small, with telemetry on; the device table's rows
for model in tiny small; do
    step "run-$model" steptrace run workloads/quickstart.yaml --set device=cuda \
        --set model=$model --set trace.limit=100 --set telemetry.enabled=true \
        --set output="$OUT/results" --set table_format=csv --json
    step "telemetry-$model" "$PYTHON" tests/device/check_run.py "$OUT/run-$model.out" \
        --source nvml
done

# 3. modeled against measured: the table's GEMM rows beside the profile's roofline
step roofline "$PYTHON" tests/device/gemm_roofline.py "$OUT/kernels-small.csv"

# 4. the step parts, modeled from the measured table against measured on the device: the
# same workload on CUDA and on a profile timed by the table, `steptrace compare`
step measured-profile "$PYTHON" -m tests.device.measured_profile "$OUT/kernels-small.csv" \
    "$OUT/measured.yaml"
for arm in cuda "modeled:$OUT/measured.yaml"; do
    name=$( [[ $arm == cuda ]] && echo measured || echo modeled )
    step "parts-$name" steptrace run workloads/quickstart.yaml --set device="$arm" \
        --set model=small --set trace.limit=100 --set 'deployment={devices: 1}' \
        --set output="$OUT/parts-$name" --json
done
step compare-parts steptrace compare "$OUT/parts-measured" -- "$OUT/parts-modeled" \
    --allow-different --json

if ((${#failed[@]})); then
    echo "failed: ${failed[*]}"
    exit 1
fi
echo "all device checks passed; outputs in $OUT"
