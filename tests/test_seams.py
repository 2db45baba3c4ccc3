"""tools/pipeline/seams.py: what a split of a chapter into section pages would cut."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import seams  # noqa: E402
from pipeline.sources import Cell, Chapter  # noqa: E402


def test_names_in_follows_the_codes_order():
    code = """
import torch
from torch import nn as tnn
import os.path
x = torch.ones(3) + y
for i in range(n):
    total = i + total_before
with open(path) as handle:
    text = handle.read()
squares = [k * k for k in range(m)]
pick = lambda v: v + offset
def f(a):
    b = a + scale
    return helper(b)
try:
    z = x
except ValueError as err:
    z = err
"""
    imports, bound, reads = seams.names_in(code)
    assert imports == ["torch", "tnn", "os"]
    assert bound[:3] == ["x", "i", "total"] and {"handle", "text", "squares", "pick", "f",
                                                 "z", "err"} <= set(bound)
    assert reads == ["y", "range", "n", "total_before", "open", "path", "m", "offset",
                     "scale", "helper", "ValueError"]


def test_magics_and_shell_lines_are_not_python():
    assert seams.python_of("%%writefile lab.py\nimport os") == ""
    assert seams.python_of("%matplotlib inline\n!pip install x\nimport os") == \
        "pass\npass\nimport os"
    inside = seams.python_of("if missing:\n    %pip install -q x\nimport x")
    assert inside == "if missing:\n    pass\nimport x" and seams.names_in(inside)


def _chapter(*cells: Cell) -> Chapter:
    return Chapter("en", "demo", list(cells), Path("demo.md"))


def test_a_seam_cuts_what_later_sections_use_but_only_earlier_ones_define():
    chapter = _chapter(
        Cell("markdown", "# Demo\n\nOne two three."),
        Cell("code", "import math\nsize = 4\ndef helper(v):\n    return v * size"),
        Cell("markdown", "## Second\n\nFour five, {{helper(2):.1f}}."),
        Cell("code", "result = math.sqrt(size)", ["torch"]),
        Cell("code", "other = unknown_elsewhere", ["mxnet"]),
        Cell("markdown", "## Third\n\nSix."),
        Cell("code", "import math\nsize = 8\nprint(math.pi * size, result)"),
    )
    parts = seams.sections(chapter, "torch")
    assert [p.title for p in parts] == ["(opening)", "Second", "Third"]
    assert [p.words for p in parts] == [4, 3, 1]
    assert seams.cut_by_seam(parts, 1) == (["math"], ["helper", "size"])
    # the third section imports math and binds size itself: only `result` crosses
    assert seams.cut_by_seam(parts, 2) == ([], ["result"])
    mx = seams.sections(chapter, "mxnet")
    assert "unknown_elsewhere" in mx[1].needs and seams.cut_by_seam(mx, 2) == ([], [])


def test_the_command_reports_every_section_of_a_real_chapter():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "book.py"), "seams",
                           "host-device-sync", "--framework", "torch"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("host-device-sync (torch): ")
    assert any(line.startswith("Exercises") for line in lines)
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "book.py"), "seams", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no chapter named 'nope'" in bad.stderr


def test_every_tab_of_every_page_is_one_a_reader_can_finish():
    """No English page holds more than about 6,000 words of prose for one framework's tab
    (6,200 with the margin of a page that grows by a paragraph): a longer one is split into
    section pages (``book.py seams`` shows where). The Chinese edition says the same."""
    from pipeline import sources

    too_long = {}
    for chapter in sources.chapters("en"):
        for framework in ("torch", "mxnet"):
            words = sum(part.words for part in seams.sections(chapter, framework))
            if words > 6200:
                too_long[f"{chapter.name} ({framework})"] = words
    assert not too_long, f"split these pages into section pages: {too_long}"
