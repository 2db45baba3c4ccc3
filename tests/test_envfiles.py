"""The environment files, the README and CI agree with each other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _environment_pip() -> list[str]:
    text = (ROOT / "environment.yml").read_text()
    pip_block = text.split("- pip:", 1)[1]
    return re.findall(r"^\s+- (\S+)\s*$", pip_block, flags=re.M)


def test_requirements_and_environment_list_the_same_packages():
    assert _requirements() == _environment_pip()


def test_environment_is_python_311_with_mxnet_numpy_pair():
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s+- python=3\.11\s*$", text, flags=re.M)
    reqs = _requirements()
    assert "mxnet==1.9.1" in reqs and "numpy==1.23.5" in reqs and "d2l==1.0.3" in reqs
    assert any(r.startswith("jupyter-book==1.") for r in reqs)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    assert len(commands) >= 2, "README must start with the two commands"
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci
