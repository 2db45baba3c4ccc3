"""The benchmark scripts' own logic and their JSON results (figures are printed, never asserted)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _record  # noqa: E402
import multi_device  # noqa: E402


@pytest.mark.parametrize("num_gpus, max_devices, counts", [
    (0, None, [1, 2]),        # no GPU: one CPU and the two-CPU stand-in
    (1, None, [1]),           # one GPU: GPU rows only (a CPU pair would not be like for like)
    (2, None, [1, 2]),
    (4, None, [1, 2, 4]),
    (6, None, [1, 2, 4, 6]),  # all GPUs, even off the doubling sequence
    (8, 4, [1, 2, 4]),
    (8, 1, [1]),
])
def test_device_counts_double_up_to_all_gpus(num_gpus, max_devices, counts):
    assert multi_device.device_counts(num_gpus, max_devices) == counts


def test_table_aligns_columns_with_their_formats():
    text = _record.table(["devices", "acc"], [["1 x cpu", 0.91234], ["2 x cpu", 0.9]],
                         ["", ".3f"])
    assert text.splitlines() == ["devices    acc", "1 x cpu  0.912", "2 x cpu  0.900"]


def test_saved_result_is_stamped_with_the_machine(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "results" / "demo.json"
    _record.save(out, "demo", "torch", {"epochs": 1}, ["a"], [[1.5]], [".1f"])
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "demo" and result["rows"] == [[1.5]]
    machine = result["machine"]
    assert machine["framework"].startswith("PyTorch") and machine["date"] and machine["cpu"]
    assert "gpus" in machine and "driver" in machine
    assert len(result["commit"].rstrip("+")) in (0, 40)
    assert not list(out.parent.glob("*.part"))


def test_multi_device_writes_its_json_at_smoke_size(tmp_path, fmnist_dir):
    """The whole script in a new process, training for real (on fewer images than D2L_SMOKE's
    defaults, which the next test checks: ResNet-18 on a CPU is the slow part)."""
    pytest.importorskip("torch")
    out = tmp_path / "multi_device.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "multi_device.py"),
                           "--json", str(out), "--max-devices", "1",
                           "--num-train", "64", "--num-test", "64"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, D2L_SMOKE="1", D2L_DATA_DIR=str(fmnist_dir)))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["columns"] == ["devices", "test acc", "sec/epoch", "images/sec"]
    assert [row[0] for row in result["rows"]] == ["cpu"]
    assert (result["args"]["num_train"], result["args"]["num_test"]) == (64, 64)
    assert (result["args"]["epochs"], result["args"]["batch_per_device"]) == (1, 32)  # smoke
    assert "test acc" in done.stdout


def test_multi_device_smoke_defaults(tmp_path, monkeypatch):
    """D2L_SMOKE shrinks the defaults (as the previous test runs the script, in this process,
    with training replaced): sizes, epochs, batch and rate as d2l.train receives them."""
    pytest.importorskip("torch")
    from d2l_ext import torch as d2l
    from d2l_ext.utils import TrainResult

    calls = []

    def fake_train(net, devices, batch_size, lr, num_epochs, **kwargs):
        calls.append((devices, batch_size, lr, num_epochs, kwargs))
        result = TrainResult([str(d) for d in devices], batch_size, lr)
        result.test_acc, result.epoch_seconds, result.images_per_second = [0.5], [2.0], [128.0]
        return result

    out = tmp_path / "multi_device.json"
    monkeypatch.setattr(d2l, "train", fake_train)
    monkeypatch.setattr(d2l, "num_gpus", lambda: 0)
    monkeypatch.setenv("D2L_SMOKE", "1")
    monkeypatch.setattr(sys, "argv", ["multi_device.py", "--json", str(out)])
    multi_device.main()
    assert [(len(c[0]), c[1], c[3]) for c in calls] == [(1, 32, 1), (2, 64, 1)]
    assert [c[2] for c in calls] == pytest.approx([0.1 * 32 / 256, 0.1 * 64 / 256])
    assert {(c[4]["num_train"], c[4]["num_test"]) for c in calls} == {(256, 256)}
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["args"]["num_train"] == 256 and result["args"]["epochs"] == 1
    assert [row[0] for row in result["rows"]] == ["cpu", "2 \u00d7 cpu"]
