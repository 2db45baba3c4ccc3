#!/usr/bin/env bash
# Validate the book on a machine with a CUDA GPU: the one command for maintainers and CI.
#
#   bash tools/gpu_validate.sh [--budget SECONDS] [--nbval] [--benchmarks] [--smoke]
#                              [--allow-cpu] [--no-install] [CHAPTER ...]
#
# Needs Python >= 3.11 with a CUDA build of PyTorch already installed ($PYTHON, default
# python3). Torch is used as it is, never reinstalled, upgraded or downgraded (pip runs with
# a constraint that pins the installed version); pip adds only what is missing (Jupyter
# kernel, nbclient, nbval, matplotlib, d2l_ext, ...). Without network access, point pip at
# a folder of wheels: PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels bash tools/gpu_validate.sh
# (or pass --no-install where everything is there already).
#
# It refuses to start while another process uses the GPU. Then it executes the PyTorch
# notebooks at full size, one at a time (both languages from one run): the chapters named,
# or every chapter, those whose GPU outputs are missing or oldest first. --budget (seconds,
# or minutes as 9m; counted from this script's start, setup included) runs only the
# chapters whose estimated time still fits and stops one still running at the budget's end:
# the chapters finished are written, a chapter that fails or is stopped keeps its committed
# notebooks. Each run records its duration, the load, CPU steal, GPU clocks and throttling
# and the kernel's cores and threads. --nbval runs nbval over the notebooks executed,
# --benchmarks runs benchmarks/*.py with their JSON results in benchmarks/results/ (each
# only if it fits the budget). A summary says what ran, what was skipped and the time used.
# --allow-cpu --smoke is a dry run of the whole procedure on a machine without a GPU (its
# notebooks go to _build/dry-run, never over the committed ones).
set -euo pipefail
started=$(date +%s)
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null; then
    echo "gpu_validate.sh: no $PYTHON found; set PYTHON=/path/to/python3 (>= 3.11, with CUDA PyTorch)" >&2
    exit 1
fi

allow_cpu=0
install=1
args=()
for arg in "$@"; do
    case $arg in
        --allow-cpu) allow_cpu=1; args+=("$arg") ;;
        --no-install) install=0 ;;
        *) args+=("$arg") ;;
    esac
done

# Refuse early, before installing anything, where there is no GPU to validate on or another
# process uses it (d2l_ext/machine.py imports nothing outside the standard library).
ALLOW_CPU=$allow_cpu "$PYTHON" - <<'EOF'
import importlib.util
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
others = None
if os.path.exists("d2l_ext/machine.py"):  # (book.py validate checks again in any case)
    spec = importlib.util.spec_from_file_location("machine", "d2l_ext/machine.py")
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    others = [p for p in machine.gpu_processes() or [] if p["pid"] != os.getpid()]
if others:
    sys.exit(f"{me}: the GPU is in use by another process: {machine.processes_named(others)}. "
             "Figures measured beside it would not be the GPU's; wait until it ends (or end "
             "it) and run again.")
gpus = torch.cuda.device_count()
print(f"{me}: {f'{gpus} x {torch.cuda.get_device_name(0)}' if gpus else 'no GPU (dry run)'}, "
      f"PyTorch {torch.__version__}, Python {sys.version.split()[0]}")
EOF

if [ "$install" = 1 ]; then
    constraints=$(mktemp)
    trap 'rm -f "$constraints"' EXIT
    "$PYTHON" -c 'import torch; print(f"torch=={torch.__version__}")' >"$constraints"
    "$PYTHON" -m pip install -q --disable-pip-version-check -c "$constraints" \
        -r tools/requirements-gpu.txt
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps -e .
    rm -f "$constraints"  # (exec below replaces this shell: no EXIT trap then)
fi

exec "$PYTHON" tools/book.py validate --started "$started" ${args[@]+"${args[@]}"}
