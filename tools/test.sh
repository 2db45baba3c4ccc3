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
.venv/bin/python -m pytest -q -n 2 --dist loadfile tests "$@"  # a test file per worker
echo "== nbval, smoke size: the Chinese notebooks and the English MXNet ones"
D2L_SMOKE=1 .venv/bin/python -m pytest -q -p no:cacheprovider --nbval-lax \
    --nbval-sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadscope \
    notebooks/zh notebooks/en/mxnet
echo "== numpy-2 environment (torch only), as on Colab: the tests of code that computes with"
echo "   numpy or torch, then nbval over the English PyTorch notebooks at smoke size"
# Left out here (they ran above, and numpy's version does not enter them): process faults,
# the book pipeline and build, the site, workflows, environment files, the GPU runner script;
# the tests that start process groups to run the pages' scripts (the nbval run below
# executes those scripts under numpy 2, in the notebooks themselves); and the tests of
# d2l.train in two processes (their data path is the one-process tests', run here).
.venv-np2/bin/python -m pytest -q -n 2 --dist loadfile tests "$@" \
    -k "not spawn and not the_pages and not timing_gives and not two_processes and not started_by_torchrun" \
    --ignore tests/test_faults.py --ignore tests/test_execute.py --ignore tests/test_site.py \
    --ignore tests/test_workflows.py --ignore tests/test_envfiles.py \
    --ignore tests/test_gpu_validate.py --ignore tests/test_book.py --ignore tests/test_zh.py
D2L_SMOKE=1 .venv-np2/bin/python -m pytest -q -p no:cacheprovider --nbval-lax \
    --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -n 2 --dist loadscope \
    notebooks/en/torch
