"""Every page true on the machine that ran it.

A chapter's prose is the same whatever machine executes it, so it may not name the run's
machine or framework version in words: "this CPU run cannot measure", "the PyTorch 2.13 that
ran this page" were true on one machine and false on the next. Such facts come from the run
(``{{...}}`` values, the run note). These tests read the sources of both languages, and the
executed notebooks against their own run notes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(r"^```\{code-cell\}.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
VALUE = re.compile(r"\{\{.*?\}\}", re.S)

#: Words that assume the run had no GPU: true on a CPU run only.
CPU_ONLY = {
    "en": [r"\bthis CPU\b", r"\bour CPU\b", r"\bthis page's CPU\b", r"\bran on a CPU\b",
           r"\bpublished pages?, a CPU\b", r"\bthis CPU-only\b"],
    "zh": [r"这台 ?CPU", r"本页的 ?CPU", r"本页(?:是|已经?)在 ?CPU 上运行", r"这次 ?CPU 运行"],
}
#: Words that assume the run had a GPU: true on a GPU run only.
GPU_ONLY = {
    "en": [r"\bthis GPU\b", r"\bthis (?:H100|H200|A100|T4|V100)\b", r"\bour GPU\b",
           r"\bran on (?:an? )?(?:H100|H200|A100|GPU)\b"],
    # (Chinese 这块 GPU is also the generic "the GPU in question": not flagged)
    "zh": [r"本页的 ?GPU", r"本页(?:是|已经?)在 ?GPU 上运行", r"这次 ?GPU 运行"],
}
#: A framework version typed where the running one is meant.
VERSION = r"(?:PyTorch|MXNet) \d+(?:\.\d+)+"
TYPED_VERSION = {
    "en": [VERSION + r"[^.;:()]{0,40}\b(?:that|which) (?:runs?|ran)\b",
           VERSION + r",?\s(?:which|that)\sthis\spage",
           r"\b(?:runs?|ran) this page\b[^.;]{0,40}" + VERSION,
           r"this page's " + VERSION],
    "zh": [r"(?:运行|跑)本页的 ?" + VERSION,
           VERSION + r"[^。；]{0,12}(?:运行本页|本页所用|本页运行)",
           r"本页(?:所用|使用|运行)的 ?" + VERSION],
}


def _prose(text: str, computed: bool = False) -> str:
    """Markdown without code cells and inline code (what a reader reads as sentences);
    without the values the run fills in (``{{...}}``, which the run computes) unless
    ``computed``."""
    text = INLINE_CODE.sub("``", CODE.sub("", text))
    return text if computed else VALUE.sub("{{}}", text)


def _hits(text: str, patterns: list[str]) -> list[str]:
    found = []
    for pattern in patterns:
        for m in re.finditer(pattern, text):
            line = text[:m.start()].count("\n") + 1
            found.append(f"line {line}: {text[max(0, m.start() - 40):m.end() + 40]!r}")
    return found


SOURCES = sorted((ROOT / "chapters").glob("*/*.md"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_prose_names_neither_the_runs_device_nor_its_framework_version(path):
    lang = path.parent.name
    prose = _prose(path.read_text(encoding="utf-8"))
    found = _hits(prose, CPU_ONLY[lang] + GPU_ONLY[lang] + TYPED_VERSION[lang])
    assert not found, (f"{path.relative_to(ROOT)} words the run's machine or version itself "
                       "(cite it from the run, or write what holds on any device):\n"
                       + "\n".join(found))


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*/*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS,
                         ids=lambda p: "/".join(p.relative_to(ROOT / "notebooks").parts))
def test_an_executed_page_says_nothing_its_run_contradicts(path):
    nb = nbformat.read(path, 4)
    lang = path.parts[-3]
    run = nb.metadata["d2l_ext"]["run"]
    prose = "\n".join(_prose(c.source, computed=True) for c in nb.cells
                      if c.cell_type == "markdown")
    wrong = (CPU_ONLY if run.get("gpus") else GPU_ONLY)[lang] + TYPED_VERSION[lang]
    found = _hits(prose, wrong)
    assert not found, (f"{path.relative_to(ROOT)} ran on {run['machine']} with "
                       f"{run['framework']}, but its prose says otherwise:\n" + "\n".join(found))


@pytest.mark.parametrize("lang, sentence, caught", [
    ("en", "The published page ran on a CPU.", True),
    ("en", "the PyTorch 2.13 that ran this page", True),
    ("en", "PyTorch 2.13, which this page runs", True),
    ("en", "a bound that this CPU run cannot measure", True),
    ("en", "on this H100 the call took", True),
    ("en", "PyTorch 2.9 added the API; since PyTorch 2.4 the fused kernel runs on CPUs", False),
    ("en", "On a CPU the call does the work; on a GPU it returns at once.", False),
    ("en", "the machine that ran this page", False),
    ("zh", "运行本页的 PyTorch 2.13", True),
    ("zh", "在本页的 CPU 上它们只是普通的函数调用", True),
    ("zh", "本页的 GPU 运行", True),
    ("zh", "没有加速器时，本页在 CPU 上运行", False),
    ("zh", "PyTorch 2.4 新增了适用于任何加速器的事件类型", False),
    ("zh", "在运行本页的设备上", False),
])
def test_the_patterns_catch_what_they_should(lang, sentence, caught):
    patterns = CPU_ONLY[lang] + GPU_ONLY[lang] + TYPED_VERSION[lang]
    assert bool(_hits(sentence, patterns)) is caught
