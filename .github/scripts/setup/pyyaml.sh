#!/usr/bin/env bash
# accelerators.py reads the manifests with PyYAML; a bare runner's or container's python3 may
# lack it. Run before the first accelerators.py call of a job.
set -euo pipefail
python3 -c "import yaml" 2>/dev/null || python3 -m pip install -q pyyaml
