#!/usr/bin/env bash
# Builds and tests flagos (host accelerator) on the GPU machine's torch 2.11 / triton 3.6, with the GPU
# hidden so the host accelerator and its Triton back end are the only ones active. Writes logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 MAX_JOBS=16
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -c "import torch, triton, sys; print(sys.version, torch.__version__, triton.__version__)" | tee "$OUT/versions.txt"
FLAGOS_SKIP_EXT=1 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
( time python3 setup.py -q build_ext --inplace -j 16 ) > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
tail -3 "$OUT/build.log"
export CUDA_VISIBLE_DEVICES=""
python3 -m pytest tests/runtime tests/triton_backend -q -p no:cacheprovider -x "$@" > "$OUT/runtime.log" 2>&1; echo "runtime+triton rc=$?"; tail -3 "$OUT/runtime.log"
python3 -m pytest -p flagos --flagos-device=flagos tests/integration -q -p no:cacheprovider -p no:logging > "$OUT/integration.log" 2>&1; echo "integration rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/integration.log" | tail -15
