#!/usr/bin/env bash
# Run every test: lint, then pytest in the full environment and in the numpy-2 one.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check d2l_ext tests tools
echo "== full environment (Python 3.11, numpy 1.23.5, torch + MXNet)"
.venv/bin/python -m pytest -q "$@"
echo "== numpy-2 environment (torch only)"
.venv-np2/bin/python -m pytest -q "$@"
