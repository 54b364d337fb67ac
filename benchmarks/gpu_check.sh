#!/usr/bin/env bash
# GPU checks for the engines: run on a machine with a CUDA device, in under 8 minutes.
#
#   bash benchmarks/gpu_check.sh            # from the repository root
#
# Sections (each bounded by `timeout`, each prints one summary line at the end):
#   1. attention backends: `pytest -m gpu tests/gpu` (Triton and FlashInfer vs the torch reference)
#   2. CUDA graphs (runner replay vs eager at every bucket)
#   3. the compiled path (a served decoder's captured decode steps vs capture off)
# Without a CUDA device it prints a message and exits 0.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is false): nothing to check"
    exit 0
fi

"$PY" - <<'PYEOF'
import importlib.util, torch
print("gpu_check:", torch.cuda.get_device_name(0), "| torch", torch.__version__,
      "| triton", "yes" if importlib.util.find_spec("triton") else "no",
      "| flashinfer", "yes" if importlib.util.find_spec("flashinfer") else "no")
PYEOF

declare -a SUMMARY=()
status=0

section() {  # section NAME SECONDS CMD...: run with a time limit, record one summary line
    local name="$1" limit="$2"; shift 2
    local log start rc
    log="$(mktemp)"
    start=$(date +%s)
    timeout "$limit" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    local took=$(( $(date +%s) - start ))
    local tail_line
    tail_line="$(grep -E '(passed|failed|skipped|error)' "$log" | tail -1)"
    [ "$rc" -eq 124 ] && tail_line="TIMED OUT after ${limit}s"
    SUMMARY+=("$name (${took}s, rc=$rc): ${tail_line:-see log above}")
    [ "$rc" -ne 0 ] && status=1
    rm -f "$log"
}

# 1. attention backends
section "attention backends" 300 "$PY" -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider

# 2. CUDA graphs: captured replay equals eager; the decoder's captured decode loop (continuous
#    batching over real graphs, torch and triton attention) equals the plain path
section "cuda graphs" 100 "$PY" -m pytest -m gpu tests/gpu/test_gpu_graphs.py -q -rs -p no:cacheprovider

# 3. the compiled path: `examples/llama` served by the runtime with the plan's captured decode
#    step replayed as CUDA graphs (continuous batching across requests) equals capture off
section "compiled path" 120 "$PY" -m pytest -m gpu tests/gpu/test_gpu_compiled_path.py -q -rs -p no:cacheprovider

echo
echo "==================== gpu_check summary ===================="
for line in "${SUMMARY[@]}"; do echo "  $line"; done
exit $status
