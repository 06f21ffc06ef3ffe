#!/usr/bin/env bash
# Rebuild on torch 2.11 and re-run the runtime tests (host accelerator, GPU hidden).
set -u
export PYTHONUNBUFFERED=1 MAX_JOBS=16 CUDA_VISIBLE_DEVICES=""
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
FLAGOS_SKIP_EXT=1 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1
python3 setup.py -q build_ext --inplace -j 16 > "$OUT/build.log" 2>&1 || { grep error "$OUT/build.log" | head; exit 1; }
python3 -c "import torch
try: torch.empty(2, device='flagos:5')
except IndexError as e: print('IndexError:', e)"
python3 -m pytest tests/runtime -q -p no:cacheprovider -x > "$OUT/runtime.log" 2>&1; echo "runtime rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Fatal" "$OUT/runtime.log" | tail -8
