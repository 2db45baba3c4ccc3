#!/usr/bin/env bash
# Run every test: lint; the book build (strict); pytest (library, book, site in a browser)
# in the full environment; nbval over every notebook at smoke size, each once: the English
# PyTorch ones in the numpy-2 environment (as on Colab), the others in the full one; the
# tests again under numpy 2.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check d2l_ext tests tools benchmarks
echo "== book: strict build of both editions"
.venv/bin/python tools/book.py build
echo "== full environment (Python 3.11, numpy 1.23.5, torch + MXNet)"
.venv/bin/python -m pytest -q tests "$@"
echo "== nbval, smoke size: the Chinese notebooks and the English MXNet ones"
D2L_SMOKE=1 .venv/bin/python -m pytest -q -p no:cacheprovider --nbval-lax \
    --nbval-sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadscope \
    notebooks/zh notebooks/en/mxnet
echo "== numpy-2 environment (torch only), as on Colab: the tests, then nbval over the"
echo "   English PyTorch notebooks at smoke size"
.venv-np2/bin/python -m pytest -q tests "$@"
D2L_SMOKE=1 .venv-np2/bin/python -m pytest -q -p no:cacheprovider --nbval-lax \
    --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadscope \
    notebooks/en/torch
