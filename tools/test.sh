#!/usr/bin/env bash
# Run every test: lint; the book build (strict); pytest (library, book, site in a browser)
# in the full environment; nbval over every notebook at smoke size; the PyTorch half again
# under numpy 2.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check d2l_ext tests tools benchmarks
echo "== book: strict build of both editions"
.venv/bin/python tools/book.py build
echo "== full environment (Python 3.11, numpy 1.23.5, torch + MXNet)"
.venv/bin/python -m pytest -q tests "$@"
echo "== nbval: every notebook, smoke size"
D2L_SMOKE=1 .venv/bin/python -m pytest -q -p no:cacheprovider --nbval-lax \
    --nbval-sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadscope notebooks
echo "== numpy-2 environment (torch only)"
.venv-np2/bin/python -m pytest -q tests "$@"
