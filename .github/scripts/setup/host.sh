#!/usr/bin/env bash
# Set-up for an accelerator config (.github/configs/*.yml, key `setup`), run with the
# config's env by `accelerators.py setup NAME` before `make build`.
#
# Checks the tools the build needs and, when TORCH_INDEX_URL is set, installs the torch
# version the Makefile pins from that index into the venv first (the CPU wheel instead of
# PyPI's CUDA build, or a CUDA wheel for a GPU runner), so that make's own
# `pip install torch==X` finds it already satisfied. The pin is read from the Makefile so
# that it is written down once.
set -euo pipefail
cd "$(dirname "$0")/../../.."
VENV="${VENV:-.venv}"

missing=()
for tool in make c++ python3; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "setup: missing tools: ${missing[*]} (the build needs make, a C++ compiler and Python 3.10+)" >&2
  exit 1
fi
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else
  "setup: Python 3.10+ is needed, found " + sys.version.split()[0])'

if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  torch_pin=$(sed -n 's/.*torch==\([0-9][0-9.]*\).*/\1/p' Makefile | head -n 1)
  if [[ -z "$torch_pin" ]]; then
    echo "setup: no torch==X.Y.Z pin found in the Makefile" >&2
    exit 1
  fi
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "torch==$torch_pin" --index-url "$TORCH_INDEX_URL"
  echo "setup: torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') from $TORCH_INDEX_URL in $VENV"
fi
echo "setup: $(python3 --version), $(c++ --version | head -n 1), $(make --version | head -n 1)"
