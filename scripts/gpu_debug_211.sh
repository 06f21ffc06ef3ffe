#!/usr/bin/env bash
# torch 2.11 follow-up: C++ backtrace of a crash (cuda-gdb works without GPU code) and the re-run of the
# tests that failed there. Writes logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 MAX_JOBS=16 CUDA_VISIBLE_DEVICES=""
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
FLAGOS_SKIP_EXT=1 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1
python3 setup.py -q build_ext --inplace -j 16 > "$OUT/build.log" 2>&1 || { grep error "$OUT/build.log" | head; exit 1; }
cuda-gdb -batch -ex run -ex bt --args python3 -c "import torch; torch.empty(2, device='flagos:5')" > "$OUT/gdb.log" 2>&1
grep -E "^#[0-9]+ " "$OUT/gdb.log" | head -30
python3 -m pytest tests/runtime -q -p no:cacheprovider --deselect tests/runtime/test_device.py::test_device_index_out_of_range_is_a_clear_error > "$OUT/runtime.log" 2>&1; echo "runtime rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Fatal" "$OUT/runtime.log" | tail -8
python3 -m pytest -p flagos --flagos-device=flagos tests/integration -q -p no:cacheprovider -p no:logging -k "mode_reaches or normalizations or max_autotune or dummy" > "$OUT/integration.log" 2>&1; echo "integration rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/integration.log" | tail -8
