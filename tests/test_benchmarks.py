"""The benchmark scripts' own logic (their figures are printed, never asserted)."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "multi_device.py"
_spec = importlib.util.spec_from_file_location("multi_device", _PATH)
multi_device = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(multi_device)


@pytest.mark.parametrize("num_gpus, max_devices, counts", [
    (0, None, [1, 2]),        # no GPU: one device and the two-CPU stand-in
    (1, None, [1, 2]),        # one GPU: the stand-in still runs
    (2, None, [1, 2]),
    (4, None, [1, 2, 4]),
    (6, None, [1, 2, 4, 6]),  # all GPUs, even off the doubling sequence
    (8, 4, [1, 2, 4]),
    (8, 1, [1]),
])
def test_device_counts_double_up_to_all_gpus(num_gpus, max_devices, counts):
    assert multi_device.device_counts(num_gpus, max_devices) == counts
