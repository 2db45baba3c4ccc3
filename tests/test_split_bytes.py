"""d2l_ext.split_bytes imports no framework, so that the MXNet tab's splits count their bytes
without PyTorch; d2l_ext.tensor_parallel_mxnet imports with torch unavailable."""

import subprocess
import sys

import pytest

BLOCK_TORCH = "import sys; sys.modules['torch'] = None; "


def _imports(module: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + f"import {module}"],
                          capture_output=True, text=True, timeout=120)


def test_the_byte_formulas_need_no_framework():
    assert _imports("d2l_ext.split_bytes").returncode == 0


def test_the_mxnet_splits_import_without_torch():
    pytest.importorskip("mxnet")
    done = _imports("d2l_ext.tensor_parallel_mxnet")
    assert done.returncode == 0, done.stderr[-2000:]
