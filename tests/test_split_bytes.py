"""d2l_ext.split_bytes imports no framework, so that the MXNet tab's splits count their bytes
without PyTorch; the MXNet splits import with torch unavailable."""

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
    for module in ("tensor_parallel_mxnet", "context_parallel_mxnet", "expert_parallel_mxnet"):
        done = _imports(f"d2l_ext.{module}")
        assert done.returncode == 0, done.stderr[-2000:]


def test_load_imbalance_and_work():
    from d2l_ext.split_bytes import Work, load_imbalance
    assert load_imbalance([2, 2, 2, 2]) == 1.0
    assert load_imbalance([6, 1, 1, 0]) == 3.0
    assert load_imbalance([0, 0]) == 1.0
    with pytest.raises(ValueError, match="at least one load"):
        load_imbalance([])
    work = Work()
    work.add(12)
    work.add(3)
    assert (work.scores, work.blocks) == (15, 2)


def test_dispatch_and_ring_attention_bytes():
    from d2l_ext.split_bytes import dispatch_bytes, ring_attention_bytes
    assert dispatch_bytes(3, 2, 4, 2) == 40  # (3 + 2) rows × 4 numbers × 2 bytes
    # keys and values: 2 × (1 batch × 2 heads × 8/4 rows × 4 features) × 2 bytes = 64
    assert ring_attention_bytes(1, 2, 8, 4, 2, 4) == {"sends": 3, "per_send": 64, "total": 192}


def test_the_byte_formulas_refuse_bad_sizes_and_count_numpy_sizes_in_full():
    import numpy as np

    from d2l_ext import split_bytes as sb
    with pytest.raises(ValueError, match="processes must be at least 1"):
        sb.ring_bytes("all_reduce", 1000, 0)
    with pytest.raises(TypeError, match="seq must be a whole number"):
        sb.block_sequence_bytes(2, 8.0, 4, 2, 2)
    with pytest.raises(ValueError, match="rows_out must be at least 0"):
        sb.dispatch_bytes(-1, 2, 4, 2)
    with pytest.raises(ValueError, match="d must be at least 1"):
        sb.dispatch_bytes(1, 2, 0, 2)
    with pytest.raises(ValueError, match="rank must be between 0 and 3"):
        sb.ring_chunks(4, 4)
    with pytest.raises(TypeError, match="size must be a whole number"):
        sb.ring_positions(0, 2.0, 8)
    assert sb.ring_bytes("all_gather", 0, 4) == 0  # an empty payload sends nothing
    # int32 sizes whose products pass 2**31 give the Python ints' counts
    i32 = np.int32
    assert (sb.ring_attention_bytes(i32(8), i32(64), i32(131072), i32(128), i32(2), i32(8))
            == sb.ring_attention_bytes(8, 64, 131072, 128, 2, 8))
    assert sb.dispatch_bytes(i32(2**20), i32(2**20), i32(8192), i32(2)) == 2**35
    assert (sb.block_all_reduce_bytes(i32(8), i32(4096), i32(8192), i32(2), i32(8))
            == sb.block_all_reduce_bytes(8, 4096, 8192, 2, 8))
    assert sb.ring_bytes("all_reduce", i32(2**30), i32(8)) == 2**30 * 14 // 8
