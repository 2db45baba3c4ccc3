"""Shared fixtures: an isolated download cache, the location of the real Fashion-MNIST, and
the scripts that chapters write with ``%%writefile``."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from d2l_ext import fashion_mnist

#: MXNet 1.9.1 imports only with numpy < 1.24.
NUMPY_TOO_NEW_FOR_MXNET = tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (1, 24)


def _real_data_dir() -> Path | None:
    """Where the real files are: D2L_DATA_DIR if set and complete, else Debian's copy."""
    dirs = []
    if os.environ.get("D2L_DATA_DIR"):
        dirs.append(Path(os.environ["D2L_DATA_DIR"]))
    dirs.append(fashion_mnist.DEBIAN_DIR)
    for d in dirs:
        if all(fashion_mnist._file_in(d, name) for name in fashion_mnist.FILES):
            return d
    return None


REAL_DATA_DIR = _real_data_dir()


@pytest.fixture
def private_cache(tmp_path_factory, monkeypatch):
    """Never read Fashion-MNIST from, or download it into, the user's ~/.cache.

    (Used by the modules that load the data, with ``pytest.mark.usefixtures``.)
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(scope="session")
def fmnist_dir() -> Path:
    """The directory with the real Fashion-MNIST files (skips the test if there is none)."""
    if REAL_DATA_DIR is None:
        pytest.skip("Fashion-MNIST not found: apt-get install dataset-fashion-mnist "
                    "or set D2L_DATA_DIR")
    return REAL_DATA_DIR


@pytest.fixture(scope="session")
def numpy_too_new() -> bool:
    """Whether numpy is too new for MXNet 1.9.1 (>= 1.24)."""
    return NUMPY_TOO_NEW_FOR_MXNET


@pytest.fixture(scope="session")
def run_python():
    """``run_python(code)``: run ``code`` in a fresh interpreter of this environment."""

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)

    return run


@pytest.fixture(scope="session")
def chapter_script():
    """``chapter_script(chapter, name)``: the script that the English ``chapter`` writes to
    ``name`` with ``%%writefile`` (and extends with ``%%writefile -a``), as the page builds
    it, so that tests run the code the page shows."""
    def read(chapter: str, name: str) -> str:
        source = (Path(__file__).resolve().parents[1] / "chapters" / "en" / f"{chapter}.md"
                  ).read_text(encoding="utf-8")
        cells = re.findall(rf"^%%writefile( -a)? {re.escape(name)}\n(.*?)^```", source,
                           re.S | re.M)
        assert cells, f"{chapter}.md writes no {name}"
        assert not cells[0][0], f"{chapter}.md appends to {name} before writing it"
        script = ""
        for append, body in cells:
            script = script + body if append else body
        return script

    return read


@pytest.fixture(scope="session")
def chapter_module(tmp_path_factory, chapter_script):
    """``chapter_module(chapter, name)``: the script ``name`` that the English ``chapter``
    writes, imported as a module from a folder on ``sys.path`` (so that the ranks started by
    ``d2l_ext.comm.spawn``, which get the parent's ``sys.path``, import it too)."""
    folders: list[str] = []

    def load(chapter: str, name: str):
        module = name.removesuffix(".py")
        folder = tmp_path_factory.mktemp(module)
        (folder / name).write_text(chapter_script(chapter, name), encoding="utf-8")
        sys.path.insert(0, str(folder))
        folders.append(str(folder))
        sys.modules.pop(module, None)
        return importlib.import_module(module)

    yield load
    for folder in folders:
        sys.path.remove(folder)


@pytest.fixture
def timer_events(monkeypatch):
    """A list that records "start" and "stop" of every ``Timer`` of ``d2l_ext`` (as
    ``d2l_ext.torch`` and ``d2l_ext.mxnet`` name it), for tests that check the barriers
    around timed regions: call the fixture's ``patch(module)`` first."""
    from d2l_ext.utils import Timer

    events: list[str] = []

    class RecordingTimer(Timer):
        def start(self) -> None:
            events.append("start")
            super().start()

        def stop(self) -> float:
            events.append("stop")
            return super().stop()

    def patch(module) -> list[str]:
        monkeypatch.setattr(module, "Timer", RecordingTimer)
        return events

    return patch
