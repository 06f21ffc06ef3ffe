#!/usr/bin/env bash
# Set-up for NVIDIA runners (.github/configs/cuda.yml, flagos-cuda.yml): a GPU must be
# visible, then the host set-up installs the CUDA torch wheel from TORCH_INDEX_URL.
set -euo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
  echo "setup: no NVIDIA GPU is visible (nvidia-smi failed): is the job on a GPU runner, and" \
       "does its container get the GPUs (container-options: --gpus all)?" >&2
  exit 1
fi
exec bash "$(dirname "$0")/host.sh"
