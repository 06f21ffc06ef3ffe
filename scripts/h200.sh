#!/usr/bin/env bash
# Build, test and benchmark flagos on an NVIDIA GPU machine in one run (the device
# tool's H200: torch 2.11.0+cu130, triton 3.6.0, Python 3.12, no network).
#
#   bash scripts/h200.sh build smoke tests ...     # phases, in the order given
#
# Phases: build, smoke, pinned-dist (is_pinned() of pinned factories, and the distributed area's
# worker under faulthandler and gdb), tests (runtime + Triton back end on the cuda accelerator),
# host-tests (the same with the GPU hidden: host accelerator on this torch),
# integration, attention (its runtime and compile tests), conformance-flagos,
# conformance-cuda, bench, compile-times, profile (benchmarks/profile_models.py),
# eager-overhead (benchmarks/bench_eager.py: per-op host cost, flagos vs cuda),
# call-profile (benchmarks/profile_calls.py: warm compiled calls under cProfile, flagos vs cuda;
# CALL_PROFILE_ARGS="--workload qwen3-short --mode eager" for others),
# ops-full-cuda, ops-full-flagos (the op coverage area's full tier, -n 16), ops-shards-cuda,
# ops-shards-flagos (the same cases as 4 pytest-split shards side by side, -n 4 each, merged
# and checked identical to the -n 16 run), ops-agreement (flagos-cuda vs cuda, case by case).
# The op phases need pytest-split and expecttest, which the image lacks: carry their wheels in
# .whl (see OPS_WHEELS below). OPS_SHARE (default 1/8 of op_db) and OPS_SAMPLES (default all)
# size the full tier to fit the 10-minute call: a full phase at 1/8 is ~375 cases of ~3000.
# OPS_WORKERS (16) and OPS_SHARD_WORKERS (4) set the xdist workers of the two kinds of phase.
# Op reports go to $OUT/ops-reports.tar.gz, the agreement and shard checks to $OUT/ops-*.md.
# Phases joined by '+' run at the same time (tests only: timings run alone).
# The device tool brings back at most 8 files from $OUT: more outputs go into one tarball.
# Logs go to $OUT/logs.tar.gz (one file per phase, refreshed after each phase,
# so a run cut short keeps them), one line per phase to $OUT/summary.txt;
# benchmark JSON and profiles to $OUT/.
set -u
export PYTHONUNBUFFERED=1 MAX_JOBS=16 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:-/tmp/out}
LOGS=$(mktemp -d)
mkdir -p "$OUT" reports
save_logs() { tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null; }
trap save_logs EXIT
PY=python3
CONF_ARGS=(-q -p no:cacheprovider --hypothesis-profile=flagos-ci ${CONF_EXTRA:-})  # CONF_EXTRA="-n 4": xdist
# TESTS_EXTRA: more pytest arguments for the tests phase ("-n 4")

OPS_DIR=$LOGS/ops
OPS_WHEELS=${OPS_WHEELS:-.whl}  # pytest_split-*.whl, expecttest-*.whl (pip download, py3-none-any)
save_ops() { tar -czf "$OUT/ops-reports.tar.gz" -C "$OPS_DIR" . 2>/dev/null; }
ops_setup() {
  mkdir -p "$OPS_DIR/shards"
  if ! $PY -c "import pytest_split, expecttest" 2>/dev/null && ls "$OPS_WHEELS"/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/ops-site "$OPS_WHEELS"/*.whl
    export PYTHONPATH=/tmp/ops-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  $PY -c "import pytest_split, expecttest" || echo "ops: pytest-split or expecttest missing (carry $OPS_WHEELS)" | tee -a "$OUT/summary.txt"
}
ops_pytest() {  # ops_pytest cuda|flagos REPORT ARG...: the full tier of test_ops.py on the device
  local which=$1 report=$2; shift 2
  local device=flagos toml=flagos-cuda
  [ "$which" = cuda ] && { device=cuda; toml=cuda; }
  # exec: the phase's timeout then signals pytest itself, not a bash that would leave pytest
  # and its xdist workers running into the next phase
  exec env FLAGOS_OPS_TIER=full FLAGOS_OPS_SHARE="${OPS_SHARE:-1/8}" ${OPS_SAMPLES:+FLAGOS_OPS_SAMPLES=$OPS_SAMPLES} \
    $PY -m pytest -p flagos --flagos-device=$device conformance/test_ops.py -q -p no:cacheprovider \
    --flagos-compile-threads=1 --flagos-expectations=conformance/expectations/$toml.toml \
    --flagos-report="$report" "$@"
}
ops_label() { [ "$1" = cuda ] && echo cuda || echo flagos-cuda; }

phase() {  # phase NAME TIMEOUT CMD...: runs CMD, logs it, records status and time
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -E "passed|failed|error|PASS|FAIL" "$LOGS/$name.log" | tail -1)
  echo "$name rc=$rc $((SECONDS - start))s :: $tail_line" | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR|FAIL )" "$LOGS/$name.log" | head -40 | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt"
  save_logs
  return $rc
}

run_phase() {
  local p=$1
  case $p in
    build)
      phase install 300 env FLAGOS_SKIP_EXT=1 $PY -m pip install -q --no-build-isolation --no-deps -e .
      # CXX/CC override the image's compiler (FLAGOS_CXX=/usr/bin/g++): a g++ that links
      # libstdc++ statically into the extension breaks every exception it throws.
      phase build 600 env ${FLAGOS_CXX:+CXX=$FLAGOS_CXX} ${FLAGOS_CC:+CC=$FLAGOS_CC} FLAGOS_WITH_CUDA=1 \
        $PY setup.py -q build_ext --inplace -j 16 || exit 1
      { echo "CXX=${CXX:-} FLAGOS_CXX=${FLAGOS_CXX:-}"; readelf -d torch_fl/_C*.so | grep NEEDED
        CUDA_VISIBLE_DEVICES= $PY -c "import torch, torch_fl
try: torch.empty(2, device='flagos:5')
except IndexError as e: print('error path ok:', str(e)[:70])"; echo "error path rc=$?"
      } 2>&1 | tee -a "$OUT/summary.txt"
      ops_setup ;;  # the test dependencies the image lacks (the op coverage area's), for every later phase
    altbuild)  # the same extension built by the system compiler, for comparison
      { rm -rf /tmp/alt && mkdir /tmp/alt && cp -r csrc setup.py pyproject.toml torch_fl flagos_triton /tmp/alt/
        (cd /tmp/alt && CC=/usr/bin/gcc CXX=/usr/bin/g++ FLAGOS_WITH_CUDA=1 $PY setup.py -q build_ext --inplace -j 16 2>&1 | grep -E "error" | head)
        for mode in host cuda; do
          vis=""; [ $mode = host ] && vis="CUDA_VISIBLE_DEVICES="
          env $vis PYTHONPATH=/tmp/alt TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "
import torch, torch_fl; print(torch_fl.__file__, torch.flagos.accelerator_name())
try: torch.empty(2, device='flagos:5')
except IndexError as e: print('altbuild $mode ok:', str(e)[:80])"; echo "altbuild $mode rc=$?"
        done; } > "$LOGS/altbuild.log" 2>&1; grep -E "altbuild|error|Error" "$LOGS/altbuild.log" | head -20 >> "$OUT/summary.txt" ;;
    smoke) phase smoke 300 $PY scripts/cuda_smoke.py ;;
    diag)  # toolchains, and a C++ backtrace of an error raised inside torch_fl._C
      { which -a g++ gcc; g++ --version | head -1; /usr/bin/g++ --version | head -1
        ldd torch_fl/_C*.so | grep -E "stdc|gcc_s|c10"
        $PY -c "import torch; print(torch.__config__.show())" | grep -iE "gcc|compiler|abi"
        CUDA_VISIBLE_DEVICES= cuda-gdb -q -batch -ex run -ex bt --args $PY -c \
          "import torch; torch.empty(2, device='flagos:5')" 2>&1 | grep -vE "^\[(New|Thread|Detaching)" | tail -30
      } > "$LOGS/diag.log" 2>&1; cat "$LOGS/diag.log" | head -60 >> "$OUT/summary.txt" ;;
    pinned-dist)  # two cuda-accelerator failures once (fixed, kept as a check): what is_pinned() says of a pinned
      # factory's memory, before and after the first flagos tensor; and where the distributed area's
      # worker dies (faulthandler, then a gdb backtrace), with the backend string of the area and without
      { CUDA_LAUNCH_BLOCKING=0 $PY -c "
import torch, torch_fl
a = torch.empty(64, pin_memory=True)
print('factory before any flagos tensor: is_pinned()', a.is_pinned(), 'is_pinned(cuda)', a.is_pinned(device='cuda'))
torch.zeros(1, device='flagos')
print('after a flagos tensor: factory', a.is_pinned(), 'new factory', torch.empty(8, pin_memory=True).is_pinned(),
      'pageable', torch.empty(8).is_pinned(), 'pin_memory()', torch.randn(8).pin_memory().is_pinned())"
        $PY -c "
import sys, textwrap; sys.path.insert(0, 'conformance')
import test_distributed as t
open('/tmp/dist_worker.py', 'w').write('import faulthandler; faulthandler.enable()\nimport torch\nimport torch_fl\n'
                                      + textwrap.dedent(t.WORKER))"
        for backend in flagos:flagos flagos; do
          timeout 90 $PY -X faulthandler /tmp/dist_worker.py 0 1 $((29500 + RANDOM % 1000)) flagos $backend 0 2>&1 | tail -30 | cut -c1-300
          echo "dist worker rc=${PIPESTATUS[0]} backend=$backend"
        done
        gdb=$(command -v gdb || command -v cuda-gdb) && timeout 150 "$gdb" -q -batch -ex run -ex bt --args \
          $PY /tmp/dist_worker.py 0 1 29871 flagos flagos:flagos 0 2>&1 | grep -vE "^\[(New|Thread|Detaching)" | tail -50 | cut -c1-300
      } > "$LOGS/pinned-dist.log" 2>&1; head -150 "$LOGS/pinned-dist.log" >> "$OUT/summary.txt" ;;
    tests) phase tests 600 $PY -m pytest tests/runtime tests/triton_backend -q -p no:cacheprovider ${TESTS_EXTRA:-} ;;
    host-tests) phase host-tests 600 env CUDA_VISIBLE_DEVICES= $PY -m pytest tests/runtime -q -p no:cacheprovider ;;
    attention) phase attention 600 $PY -m pytest -p flagos --flagos-device=flagos tests/runtime/test_attention.py \
      tests/integration/test_compile_attention.py -q -p no:cacheprovider ;;
    integration) phase integration 600 $PY -m pytest -p flagos --flagos-device=flagos tests/integration -q -p no:cacheprovider ;;
    conformance-flagos)
      phase conformance-flagos 600 $PY -m pytest -p flagos --flagos-device=flagos conformance/ "${CONF_ARGS[@]}" \
        --flagos-expectations=conformance/expectations/flagos-cuda.toml --flagos-report=reports/flagos-cuda.json
      cp reports/flagos-cuda.* "$LOGS/" 2>/dev/null ;;
    conformance-cuda)
      phase conformance-cuda 600 $PY -m pytest -p flagos --flagos-device=cuda conformance/ "${CONF_ARGS[@]}" \
        --flagos-expectations=conformance/expectations/cuda.toml --flagos-report=reports/cuda.json
      cp reports/cuda.* "$LOGS/" 2>/dev/null ;;
    bench) phase bench 900 $PY benchmarks/bench_compile.py ${BENCH_ARGS:-} ;;
    compile-times) phase compile-times 900 $PY benchmarks/bench_compile.py --compile-times ${COMPILE_TIMES_ARGS:-} ;;
    eager-overhead) phase eager-overhead 300 $PY benchmarks/bench_eager.py ;;
    call-profile) phase call-profile 300 $PY benchmarks/profile_calls.py --devices flagos,cuda \
      --out "$OUT/call-profile.md" ${CALL_PROFILE_ARGS:-} ;;
    profile) phase profile 900 $PY benchmarks/profile_models.py --out "$OUT/profile.md" ${PROFILE_ARGS:-} ;;
    ops-full-cuda|ops-full-flagos)
      ops_setup; which=${p#ops-full-}; label=$(ops_label "$which")
      export -f ops_pytest; export PY
      phase "$p" 560 bash -c 'ops_pytest "$@"' _ "$which" "$OPS_DIR/$label.json" -n "${OPS_WORKERS:-16}"
      save_ops ;;
    ops-shards-cuda|ops-shards-flagos)  # 4 machines' worth: 4 shards of 4 workers, side by side
      ops_setup; which=${p#ops-shards-}; label=$(ops_label "$which")
      export -f ops_pytest; export PY
      for k in 1 2 3 4; do
        phase "$p-$k" 560 bash -c 'ops_pytest "$@"' _ "$which" "$OPS_DIR/shards/$label.shard-$k-of-4.json" \
          -n "${OPS_SHARD_WORKERS:-4}" --splits 4 --group "$k" &
      done
      wait
      # against the -n 16 run of the same call (ops-full-X before it); otherwise compare the
      # tarballs' reports afterwards with the same op_agreement.py command
      { $PY .github/scripts/matrix_summary.py "$OPS_DIR"/$label.json "$OPS_DIR"/shards/$label.shard-*.json
        [ -f "$OPS_DIR/$label.json" ] && $PY scripts/op_agreement.py --a "$OPS_DIR/$label.json" \
          --b "$OPS_DIR"/shards/$label.shard-*.json --label-a "$label (-n 16)" --label-b "$label (4 shards)" --identical
      } > "$OUT/ops-shards-$label.md" 2>&1
      tail -1 "$OUT/ops-shards-$label.md" | sed "s/^/  $p: /" | tee -a "$OUT/summary.txt"
      save_ops ;;
    ops-agreement)
      $PY scripts/op_agreement.py --a "$OPS_DIR/cuda.json" --b "$OPS_DIR/flagos-cuda.json" \
        -o "$OUT/ops-agreement.md" 2>&1 | tee -a "$OUT/summary.txt"
      grep -E "^[0-9]+ cases on both" "$OUT/ops-agreement.md" | tee -a "$OUT/summary.txt" ;;
    *) echo "unknown phase $p" | tee -a "$OUT/summary.txt" ;;
  esac
}

for group in "$@"; do
  if [[ $group == *+* ]]; then
    IFS=+ read -ra together <<< "$group"
    for p in "${together[@]}"; do run_phase "$p" & done
    wait
  else
    run_phase "$group"
  fi
done
