"""The notebooks' install cell, run as a reader's fresh Colab or Studio Lab kernel runs it.

A wheel of ``d2l_ext`` is built from this checkout, and a fresh virtual environment (made
with ``--system-site-packages``) sees every package of the environment running the tests
except ``d2l_ext``, as Colab has torch, numpy and matplotlib but not the book's library.
The first code cell of a committed notebook then runs in IPython there, with its
``pip install "d2l-ext[...] @ git+<repository>"`` pointed at the local wheel (with
``--no-deps``: nothing is downloaded), and the notebook's import works afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("IPython", reason="the install cell runs in IPython (!pip)")

#: Run in the fresh environment: the cell in IPython, then what its ``!pip`` returned.
RUN_CELL = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell(open(sys.argv[1], encoding="utf-8").read()).raise_error()
print(json.dumps({"pip_status": shell.user_ns.get("_exit_code")}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of d2l_ext built from a copy of this checkout (the build leaves its
    ``build/`` and ``*.egg-info`` folders in the copy, not in the repository)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "d2l_ext", src / "d2l_ext",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(work / "dist"), str(src)],
                   check=True, env=_offline())
    (built,) = (work / "dist").glob("d2l_ext-*.whl")
    return built


def _offline() -> dict[str, str]:
    return dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")


def _fresh_environment(where: Path) -> Path:
    """A new venv (``--system-site-packages``) that also sees this environment's packages,
    all but d2l_ext (a folder of links to them, named in a ``.pth`` file); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(where / "venv")],
                   check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    shown = where / "packages"
    shown.mkdir()
    for entry in ours.iterdir():
        if not entry.name.startswith(("d2l_ext", "d2l-ext", "__editable__")) \
                and entry.suffix != ".pth":
            (shown / entry.name).symlink_to(entry)
    python = where / "venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "book-environment.pth").write_text(f"{shown}\n", encoding="utf-8")
    return python


def _install_cell(framework: str) -> str:
    """The first code cell of the English notebook of the book's first chapter."""
    path = ROOT / "notebooks" / "en" / framework / "async-computation.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code")
    assert cell["metadata"]["d2l_ext"]["role"] == "install"
    return "".join(cell["source"])


def _run_cell(python: Path, source: str, where: Path) -> dict:
    cell, runner = where / "cell.py", where / "run_cell.py"
    cell.write_text(source, encoding="utf-8")
    runner.write_text(RUN_CELL, encoding="utf-8")
    env = dict(_offline(), PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([str(python), str(runner), str(cell)], cwd=where, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_the_install_cell_installs_d2l_ext_in_a_fresh_environment(framework, wheel, tmp_path,
                                                                  numpy_too_new):
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    python = _fresh_environment(tmp_path)
    missing = subprocess.run([str(python), "-c", "import d2l_ext"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "No module named 'd2l_ext'" in missing.stderr

    source = _install_cell(framework)
    requirement = re.compile(rf'"d2l-ext\[{framework}\] @ git\+https://github\.com/[^"]+"')
    assert requirement.search(source), source
    local = source.replace("pip install -q", "pip install -q --no-deps")
    local = requirement.sub(f'"d2l-ext[{framework}] @ {wheel.as_uri()}"', local)
    assert _run_cell(python, local, tmp_path) == {"pip_status": 0}  # pip ran and succeeded

    check = (f"import d2l_ext, d2l_ext.{framework} as d2l\n"
             "from d2l_ext import gpu_runs\n"
             "print(d2l_ext.__file__)\n"
             "print(gpu_runs.load('async-computation').chapter)  # the wheel's data files\n")
    done = subprocess.run([str(python), "-c", check], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    where, chapter = done.stdout.split()[-2:]
    assert Path(where).is_relative_to(tmp_path / "venv") and chapter == "async-computation"
    # run again, the cell finds d2l_ext and installs nothing
    assert _run_cell(python, local, tmp_path) == {"pip_status": None}
