"""The chapter sources, their per-framework notebooks and the two languages agree."""

import io
import json
import re
import sys
import tokenize
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book  # noqa: E402

CHAPTERS = sorted(p.stem for p in (book.CHAPTERS / "en").glob("*.md") if p.stem != "index")


def _code_only(source: str) -> str:
    """Source without comments and docstrings (which may be translated)."""
    kept, prev = [], tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
        if tok.type == tokenize.COMMENT and "NBVAL" not in tok.string:
            continue
        if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT,
                                                    tokenize.DEDENT, tokenize.NL):
            prev = tok.type
            continue
        if tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            kept.append(tok.string)
        prev = tok.type
    return " ".join(t for t in kept if t.strip())


def _structure(chapter: book.Chapter) -> dict:
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    return {
        "headings": re.findall(r"^(#+) ", prose, re.M),
        "labels": re.findall(r"^\((\S+)\)=$", prose, re.M),
        "figures": re.findall(r"^```\{figure\} (\S+)", prose, re.M),
        "figure names": re.findall(r"^:name: (\S+)", prose, re.M),
        "framework blocks": re.findall(r"^:::\{framework\} (\w+)", prose, re.M),
        "values": sorted(m.group(0) for m in book.PLACEHOLDER.finditer(prose)),
    }


def test_every_chapter_exists_in_both_languages():
    assert CHAPTERS, "no chapters found"
    zh = sorted(p.stem for p in (book.CHAPTERS / "zh").glob("*.md") if p.stem != "index")
    assert zh == CHAPTERS


@pytest.mark.parametrize("name", CHAPTERS)
def test_same_code_cells_in_both_languages(name):
    en, zh = (book.parse(book.CHAPTERS / lang / f"{name}.md") for lang in ("en", "zh"))
    en_code = [(c.tags, _code_only(c.source)) for c in en.cells if c.kind == "code"]
    zh_code = [(c.tags, _code_only(c.source)) for c in zh.cells if c.kind == "code"]
    assert en_code == zh_code


@pytest.mark.parametrize("name", CHAPTERS)
def test_same_sections_figures_and_values_in_both_languages(name):
    en, zh = (book.parse(book.CHAPTERS / lang / f"{name}.md") for lang in ("en", "zh"))
    assert _structure(en) == _structure(zh)
    for lang in ("en", "zh"):
        for figure in _structure(en)["figures"]:
            assert (book.CHAPTERS / lang / figure).is_file(), f"{lang}: {figure} is missing"


def test_comment_stripping_keeps_code_and_nbval_markers():
    a = '# NBVAL_CHECK_OUTPUT\ndef f():\n    """English."""\n    return 1  # one\n'
    b = '# NBVAL_CHECK_OUTPUT\ndef f():\n    """中文。"""\n    return 1  # 一\n'
    assert _code_only(a) == _code_only(b)
    assert _code_only(a) != _code_only(a.replace("return 1", "return 2"))
    assert "NBVAL_CHECK_OUTPUT" in _code_only(a)


def test_executed_notebooks_are_up_to_date():
    assert book.stale() == []


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_split_notebooks_hold_one_framework(name, lang):
    chapter = book.parse(book.CHAPTERS / lang / f"{name}.md")
    for fw, other in (("torch", "mxnet"), ("mxnet", "torch")):
        nb = book.split(chapter, fw)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert f"from d2l_ext import {fw} as d2l" in code
        assert f"from d2l_ext import {other} as d2l" not in code
        assert ":::{framework}" not in prose
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert first_code.metadata["d2l_ext"]["role"] == "install"
        assert f"d2l-ext[{fw}]" in first_code.source
        assert "D2L_SMOKE" in code  # the one visible size knob


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_executed_notebooks_record_their_run_and_have_no_errors(name, lang):
    for fw in book.FRAMEWORKS:
        nb = nbformat.read(book.NOTEBOOKS / lang / fw / f"{name}.ipynb", 4)
        run = nb.metadata["d2l_ext"]["run"]
        assert run["machine"] and run["framework"] and run["date"]
        assert nb.cells[1].metadata["d2l_ext"]["role"] == "run-note"
        assert book.machine_name(run, lang) in nb.cells[1].source
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.output_type == "error"]
        assert errors == []
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert not book.PLACEHOLDER.search(prose), "a {{value}} was not filled in"


def test_parser_and_splitter_on_a_small_source(tmp_path):
    src = tmp_path / "demo.md"
    src.write_text("""---
kernelspec: {name: python3}
---
# Demo

Shared text.

:::{framework} torch
Only PyTorch, value {{x:.1f}}.
:::

:::{framework} mxnet
Only MXNet.
:::

```{code-cell} ipython3
x = 1.0
```

```{code-cell} ipython3
:tags: [torch]
import torch
```
""", encoding="utf-8")
    chapter = book.parse(src)
    assert [(c.kind, c.tags) for c in chapter.cells] == [
        ("markdown", []), ("code", []), ("code", ["torch"])]
    torch_nb, mxnet_nb = book.split(chapter, "torch"), book.split(chapter, "mxnet")
    assert "Only PyTorch" in torch_nb.cells[0].source
    assert "Only MXNet" not in torch_nb.cells[0].source
    assert "Only MXNet" in mxnet_nb.cells[0].source
    assert [c.source for c in mxnet_nb.cells if c.cell_type == "code"][1:] == ["x = 1.0"]
    assert book._placeholders(torch_nb) == {"{{x:.1f}}": ("x", ".1f")}
    assert book.code_hash(torch_nb) != book.code_hash(mxnet_nb)


def test_probe_reports_machine_and_versions(capsys):
    pytest.importorskip("torch")
    exec(book.probe("torch"), {})
    run = json.loads(capsys.readouterr().out)
    assert set(run) == {"machine", "framework", "python", "date"}
    assert run["framework"].startswith("PyTorch 2.")
    assert re.fullmatch(r"CPU only \(.+\)|\d+ x .+", run["machine"])


def test_run_note_names_the_machine_in_the_page_language():
    run = {"machine": "CPU only (Intel Xeon)", "framework": "PyTorch 2.13.0", "python": "3.11",
           "date": "2026-11-22", "size": "full"}
    assert "CPU only (Intel Xeon)" in book.run_note(run, "en")
    assert "仅 CPU（Intel Xeon）" in book.run_note(run, "zh")
    gpu = dict(run, machine="1 x NVIDIA H100 80GB HBM3")
    assert "1 x NVIDIA H100 80GB HBM3" in book.run_note(gpu, "zh")


def test_unknown_framework_block_is_refused(tmp_path):
    src = tmp_path / "bad.md"
    src.write_text("# Bad\n\n:::{framework} jax\ntext\n:::\n", encoding="utf-8")
    with pytest.raises(book.BookError, match="jax"):
        book.parse(src)


def test_site_ships_only_the_mathjax_bundle_its_pages_load(tmp_path):
    mathjax = tmp_path / "mathjax"
    (mathjax / "output").mkdir(parents=True)
    for name in [book.MATHJAX_BUNDLE, "tex-svg.js", "mml-chtml.js", "node-main.js",
                 "output/svg.js"]:
        (mathjax / name).write_text("")
    book._prune_mathjax(tmp_path)
    assert sorted(p.relative_to(mathjax).as_posix() for p in mathjax.rglob("*.js")) == \
        sorted([book.MATHJAX_BUNDLE, "output/svg.js"])
    (mathjax / book.MATHJAX_BUNDLE).unlink()
    with pytest.raises(book.BookError, match="sphinx-mathjax-offline"):
        book._prune_mathjax(tmp_path)
