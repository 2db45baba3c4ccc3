#!/usr/bin/env bash
# Validate the book on a machine with a CUDA GPU: the one command for maintainers and CI.
#
#   bash tools/gpu_validate.sh [--smoke] [--skip-nbval] [--skip-benchmarks] [--allow-cpu]
#
# Needs Python >= 3.11 with a CUDA build of PyTorch already installed ($PYTHON, default
# python3). Torch is used as it is, never reinstalled, upgraded or downgraded (pip runs with
# a constraint that pins the installed version); pip adds only what is missing (Jupyter
# kernel, nbclient, nbval, matplotlib, d2l_ext, ...). Without network access, point pip at
# a folder of wheels: PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels bash tools/gpu_validate.sh
#
# Then it executes every PyTorch notebook at full size (both languages from one run), runs
# nbval over them, runs benchmarks/*.py with their JSON results in benchmarks/results/, and
# prints a summary. A chapter that fails keeps its committed notebooks. --allow-cpu (with
# --smoke) is a dry run of the whole procedure on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null; then
    echo "gpu_validate.sh: no $PYTHON found; set PYTHON=/path/to/python3 (>= 3.11, with CUDA PyTorch)" >&2
    exit 1
fi

case " $* " in *" --allow-cpu "*) allow_cpu=1 ;; *) allow_cpu=0 ;; esac

# Refuse early, before installing anything, where there is no GPU to validate on.
ALLOW_CPU=$allow_cpu "$PYTHON" - <<'EOF'
import os
import sys

me = "gpu_validate.sh"
if sys.version_info < (3, 11):
    sys.exit(f"{me}: Python >= 3.11 is needed; {sys.executable} is {sys.version.split()[0]}. "
             "Set PYTHON=/path/to/python3.")
try:
    import torch
except ImportError:
    sys.exit(f"{me}: PyTorch is not installed for {sys.executable}. Install a CUDA build of "
             "PyTorch first (https://pytorch.org/get-started/locally/), or set PYTHON to the "
             "Python that has it.")
if not torch.cuda.is_available() and os.environ["ALLOW_CPU"] != "1":
    sys.exit(f"{me}: no CUDA GPU is visible to PyTorch {torch.__version__} (CUDA build: "
             f"{torch.version.cuda}). Run this on a machine with an NVIDIA GPU and a CUDA "
             "build of PyTorch; on a CPU-only machine run tools/test.sh instead.")
gpus = torch.cuda.device_count()
print(f"{me}: {f'{gpus} x {torch.cuda.get_device_name(0)}' if gpus else 'no GPU (dry run)'}, "
      f"PyTorch {torch.__version__}, Python {sys.version.split()[0]}")
EOF

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$PYTHON" -c 'import torch; print(f"torch=={torch.__version__}")' >"$constraints"
"$PYTHON" -m pip install -q --disable-pip-version-check -c "$constraints" \
    -r tools/requirements-gpu.txt
"$PYTHON" -m pip install -q --disable-pip-version-check --no-deps -e .

exec "$PYTHON" tools/book.py validate "$@"
