"""A training rank that dies or hangs ends the run with a clear error, in bounded time.

On CPU with two gloo ranks: ``d2l.train`` (one process per device, spawned) and the
multi-GPU chapter's ``torchrun`` script. Each run happens in a child process with a time
limit, so that a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent
LIMIT = 120  # seconds: far above a normal run of these sizes (about 10 s)

pytestmark = pytest.mark.usefixtures("private_cache")


def _train_with_failing_rank(how: str, fmnist_dir: Path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from nets import failing_torch_net
        from d2l_ext import torch as d2l

        if __name__ == "__main__":
            try:
                d2l.train(failing_torch_net({how!r}), [d2l.cpu(), d2l.cpu()], 64, 0.1, 2,
                          num_train=1024, num_test=256, root={str(fmnist_dir)!r},
                          timeout=5, verbose=False)
            except RuntimeError as err:
                print("RuntimeError:", err)
                sys.exit(3)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=LIMIT)


def test_a_killed_rank_is_named(fmnist_dir):
    done = _train_with_failing_rank("killed", fmnist_dir)
    assert done.returncode == 3, done.stderr[-2000:]
    assert ("RuntimeError: training rank 1 of 2 (on cpu) was killed by SIGKILL "
            "(often the out-of-memory killer") in done.stdout


def test_a_rank_that_raises_is_named_with_its_error(fmnist_dir):
    done = _train_with_failing_rank("out of memory", fmnist_dir)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "RuntimeError: training rank 1 of 2 (on cpu) failed" in done.stdout
    assert "OutOfMemoryError: CUDA out of memory (simulated by the test)" in done.stdout


def test_a_stuck_rank_times_out_instead_of_hanging(fmnist_dir):
    done = _train_with_failing_rank("stuck", fmnist_dir)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "training rank 0 of 2 (on cpu) failed" in done.stdout
    assert "waited more than timeout=5 s for the other ranks" in done.stdout


def _ranks_of(launcher: int) -> dict[int, int]:
    """RANK -> pid of the worker processes that the torchrun process ``launcher`` started."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == launcher:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        env = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        if parent == launcher and b"RANK" in env:
            ranks[int(env[b"RANK"])] = int(entry.name)
    return ranks


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the ranks through /proc")
def test_torchrun_names_a_killed_rank_of_the_chapter_script(tmp_path, fmnist_dir,
                                                            chapter_script):
    script = chapter_script("multi-gpu-concise", "train_ddp.py")
    (tmp_path / "train_ddp.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", D2L_DATA_DIR=str(fmnist_dir))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "train_ddp.py", "--cpu", "--epochs", "3", "--batch-per-device", "16",
         "--num-train", "1024", "--num-test", "128"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + LIMIT
        while len(ranks := _ranks_of(launcher.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ranks) == 2, "torchrun did not start two ranks"
        time.sleep(5)  # let them reach the training loop
        os.kill(ranks[1], signal.SIGKILL)
        output, _ = launcher.communicate(timeout=LIMIT)
    finally:
        launcher.kill()
    assert launcher.returncode != 0
    root_cause = output.split("Root Cause", 1)[1]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)", root_cause), output[-3000:]
    assert "SIGKILL" in root_cause
    assert not (tmp_path / "ddp_result.json").exists()
