"""The notebooks that Colab and SageMaker Studio Lab open, as they are.

Their prose is plain Jupyter markdown (no MyST left: roles, labels, directives, values to
fill); figures are images by their absolute URL on the published site and cross-references
links to its pages, which exist in the built site; the PyTorch notebooks ask Colab for a
GPU; the first cell says the run time, from the run's own record. The pages keep their MyST
(cross-references, figures, framework blocks), and the header's download menu offers the
per-framework notebooks only.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, notebooks, plain, sources  # noqa: E402

from d2l_ext import datasheets, gpu_runs  # noqa: E402

NOTEBOOKS = sorted(p.relative_to(config.NOTEBOOKS).as_posix()
                   for p in config.NOTEBOOKS.glob("*/*/*.ipynb"))
SITE = config.BUILD / "site"

#: What MyST leaves in prose that Jupyter does not render: a role, a label, a directive, a
#: colon fence, a value not filled in, a MyST comment.
MYST = {"role": re.compile(r"\{[\w:.-]+\}`"),
        "label": re.compile(r"^\s*\([^()\s]+\)=\s*$", re.M),
        "directive": re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{", re.M),
        "colon fence": re.compile(r"^\s*:{3,}", re.M),
        "value": re.compile(r"\{\{.*?\}\}"),
        "comment": re.compile(r"^%", re.M)}
LINK = re.compile(r"(?P<bang>!?)\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<url>[^)\s]+)\)")


def _prose(nb) -> str:
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _without_code(text: str) -> str:
    """Markdown without its code blocks and code spans, which may show MyST as text (a
    role's own backticks, after ``{name}``, stay)."""
    text = re.sub(r"^(`{3,}|~{3,})(?!\s*\{)[^\n]*\n.*?^\1[ \t]*$", "", text,
                  flags=re.S | re.M)
    return re.sub(r"(?<![}`])(`+)[^`].*?\1", "", text)


def _read(relative: str):
    return nbformat.read(config.NOTEBOOKS / relative, 4)


@pytest.mark.parametrize("relative", NOTEBOOKS)
def test_no_myst_is_left_in_a_committed_notebook(relative):
    prose = _without_code(_prose(_read(relative)))
    left = {kind: found.group(0) for kind, pattern in MYST.items()
            if (found := pattern.search(prose))}
    assert left == {}, f"{relative}: MyST left; run `tools/book.py refill` ({left})"


@pytest.mark.parametrize("relative", NOTEBOOKS)
def test_figures_and_cross_references_point_at_the_published_site(relative):
    """Every image is a figure of the site by absolute URL, drawn from this edition's
    figures; every link to the site names a page of the book and a label on it."""
    lang = relative.split("/")[0]
    site = config.site_url(lang)
    targets = plain.targets(lang)
    pages = {name: {t.anchor for t in targets.values() if t.page == name}
             for name in sources.chapter_names()}
    images = links = 0
    for match in LINK.finditer(_without_code(_prose(_read(relative)))):
        url = match["url"]
        if match["bang"]:
            images += 1
            assert url.startswith(f"{site}_images/"), url
            assert (config.CHAPTERS / lang / "img" / url.rsplit("/", 1)[1]).is_file(), url
            continue
        assert re.match(r"https?://", url), f"a relative link: {url}"
        if not url.startswith(config.site_url()):
            continue  # a link elsewhere (a paper, a repository)
        links += 1
        assert url.startswith(site), f"a link to the other edition: {url}"
        page, _, anchor = url[len(site):].partition("#")
        name = re.fullmatch(r"chapters/([\w-]+)\.html", page)
        assert name and name[1] in pages, url
        assert not anchor or anchor in pages[name[1]], f"no label {anchor} on {page}"
    chapter = Path(relative).stem
    source = (config.CHAPTERS / lang / f"{chapter}.md").read_text(encoding="utf-8")
    if "{ref}`" in source:
        assert links, f"{relative}: the source cross-references, the notebook links nothing"
    if "```{figure}" in source:
        assert images, f"{relative}: the source has figures, the notebook shows none"


@pytest.mark.parametrize("relative", NOTEBOOKS)
def test_the_pytorch_notebooks_ask_colab_for_a_gpu(relative):
    nb = _read(relative)
    nbformat.validate(nb)
    metadata = nb.metadata
    if "/torch/" in relative:
        assert metadata["accelerator"] == "GPU"
        assert metadata["colab"]["gpuType"] == "T4"
    else:
        assert "accelerator" not in metadata and "colab" not in metadata


@pytest.mark.parametrize("relative", NOTEBOOKS)
def test_the_first_cell_gives_the_run_time_from_the_run_itself(relative):
    nb = _read(relative)
    first, run = nb.cells[0], nb.metadata["d2l_ext"]["run"]
    assert first.cell_type == "markdown" and first.metadata["d2l_ext"]["role"] == "run-time"
    lang = relative.split("/")[0]
    code = [c for c in nb.cells if c.cell_type == "code"]
    stamps = [c.metadata["execution"] for c in code if "execution" in c.metadata]
    if run["size"] == "full" and not run["gpus"] and stamps:
        seconds = (max(datetime.fromisoformat(s["iopub.status.idle"]) for s in stamps)
                   - min(datetime.fromisoformat(s["iopub.status.busy"]) for s in stamps))
        minutes = round(seconds.total_seconds() / 60)
        said = re.search(r"(\d+) (?:minutes?|分钟)", first.source)
        if seconds.total_seconds() >= 60:
            assert said and int(said[1]) == minutes, first.source
        assert notebooks.THIS_RUN[lang] in first.source
    else:
        reason = "gpu" if run["gpus"] else "smoke" if run["size"] == "smoke" else "none"
        assert notebooks.NOT_RECORDED[lang][reason] in first.source
    if "T4" not in str(run.get("gpu", "")):
        assert notebooks.NOT_MEASURED[lang] in first.source  # no T4 run: no T4 figure
    record = gpu_runs.load(Path(relative).stem) if "/torch/" in relative else None
    if not (record and record.run.get("seconds")) and not run.get("gpus"):
        # no GPU run with a time to compare with: the reason, and no number of minutes
        t4 = first.source.split("T4")[-1]
        assert notebooks.NOT_ON_T4[lang].format(not_measured=notebooks.NOT_MEASURED[lang]) \
            in first.source and not re.search(r"\d", t4), first.source


def test_run_time_says_not_recorded_or_not_measured_where_no_run_measured_it():
    cells = [nbformat.v4.new_code_cell("x = 1")]
    cells[0].metadata["execution"] = {"iopub.status.busy": "2026-01-01T10:00:00.000Z",
                                      "iopub.status.idle": "2026-01-01T10:21:40.000Z"}
    run = dict(gpus=0, cpu="Test CPU", size="full", date="2026-01-01")
    en = notebooks.run_time_cell(cells, run, "torch", "en", "no-such-chapter").source
    assert "On a CPU: about 22 minutes, measured in the run" in en
    assert ("T4 GPU (this notebook asks Colab for a GPU runtime): not measured yet (the book "
            "has not run on a T4).") in en
    zh = notebooks.run_time_cell(cells, run, "mxnet", "zh", "no-such-chapter").source
    assert ("在 CPU 上约 22 分钟：这是生成本笔记本输出的那次运行从第一个单元格跑到最后一个单元格"
            "的时间，不含启动笔记本和安装依赖的时间；那次运行的机器只有 CPU（Test CPU），日期为 "
            "2026-01-01。在 SageMaker Studio Lab 的免费 T4 GPU 上：尚未实测，本书还没有在 T4 上"
            "运行过。") in zh
    zh_smoke = notebooks.run_time_cell(cells, dict(run, size="smoke"), "torch", "zh", "x").source
    assert "在 CPU 上：未记录（" in zh_smoke and "在 Colab 的免费 T4 GPU 上（" in zh_smoke
    smoke = notebooks.run_time_cell(cells, dict(run, size="smoke"), "torch", "en", "x").source
    assert "On a CPU: not recorded" in smoke and "minute" not in smoke
    t4 = dict(run, gpus=1, gpu="Tesla T4", machine="1 x Tesla T4")
    on_t4 = notebooks.run_time_cell(cells, t4, "torch", "en", "x").source
    assert "On a CPU: not recorded" in on_t4 and "runtime): about 22 minutes" in on_t4
    t4_smoke = dict(t4, size="smoke")
    untimed = notebooks.run_time_cell(cells, t4_smoke, "torch", "en", "x").source
    assert "not measured yet (the book's T4 run kept no full-size run time)." in untimed


def _record(gpu: str, seconds: float | None) -> gpu_runs.GpuRun:
    run = dict(gpus=1, gpu=gpu, machine=f"1 x {gpu}", size="full", date="2026-11-24",
               framework="PyTorch 2.11.0", cpu="Test CPU")
    if seconds is not None:
        run["seconds"] = seconds
    return gpu_runs.GpuRun("x", run, "abc1234", "0" * 16, ())


def test_run_time_on_a_t4_compares_the_datasheets_where_another_gpu_run_has_a_time(
        monkeypatch):
    """No T4 run: the T4 line gives the time of the chapter's full-size run on another GPU
    and how a T4's datasheet memory bandwidth and float32 rate compare with that GPU's,
    never a T4 time; without a timed GPU run, it says why there is nothing to go on."""
    cells = [nbformat.v4.new_code_cell("x = 1")]
    run = dict(gpus=0, cpu="Test CPU", size="full", date="2026-01-01", seconds=1300)
    monkeypatch.setattr(notebooks.gpu_runs, "load",
                        lambda chapter: _record("NVIDIA H100 80GB HBM3", 200))
    en = notebooks.run_time_cell(cells, run, "torch", "en", "x").source
    h100, t4 = datasheets.SHEETS["H100 SXM"], datasheets.SHEETS["T4"]
    memory, fp32 = round(h100.memory / t4.memory), round(h100.fp32 / t4.fp32)
    assert (memory, fp32) == (10, 8)
    assert (f"runtime): not measured yet; the book's run on 1 \u00d7 NVIDIA H100 80GB HBM3 "
            f"(2026-11-24) took about 3 minutes; a T4 has about 1/{memory} of that GPU's "
            f"memory bandwidth and about 1/{fp32} of its float32 rate (NVIDIA's datasheets, "
            "d2l_ext/datasheets.py), so expect it to take longer there.") in en
    zh = notebooks.run_time_cell(cells, run, "torch", "zh", "x").source
    assert ("（本笔记本会向 Colab 申请 GPU 运行时）：尚未实测；本书在 1 块 NVIDIA H100 80GB HBM3 "
            "上的运行（2026-11-24）用了约 3 分钟；按 NVIDIA 的数据手册（d2l_ext/datasheets.py），"
            f"T4 的显存带宽约为该 GPU 的 1/{memory}，float32 算力约为其 1/{fp32}，"
            "因此预计在 T4 上用时更长。") in zh
    # the MXNet notebooks have no GPU record (the records are PyTorch runs)
    mxnet = notebooks.run_time_cell(cells, run, "mxnet", "en", "x").source
    assert "(a T4): not measured yet (the book has not run on a T4)." in mxnet
    monkeypatch.setattr(notebooks.gpu_runs, "load", lambda chapter: _record("Radeon X", 200))
    other = notebooks.run_time_cell(cells, run, "torch", "en", "x").source
    assert "took about 3 minutes; the book's datasheet table has no figures" in other
    monkeypatch.setattr(notebooks.gpu_runs, "load",
                        lambda chapter: _record("NVIDIA H100 80GB HBM3", None))
    untimed = notebooks.run_time_cell(cells, run, "torch", "en", "x").source
    assert "runtime): not measured yet (the book has not run on a T4)." in untimed


SAMPLE = """(sec-demo)=
# Demo

% a MyST comment
See {ref}`sec-demo-part` and {ref}`the other page <sec-other>`, or `{ref}` as code.

| table | with a {ref}`sec-demo-part` |
|---|---|

```{figure} img/demo.svg
:name: fig-demo
:alt: A demo figure.

The caption, with {ref}`sec-other`.
```

:::{note}
A note with $x$ in it.
:::

:::{admonition} Try it
:class: dropdown
Run it.
:::

```python
print("{ref}`kept` in code")
```

```{code-block} bash
echo hi
```

$$a = b$$ (eq-demo)

(sec-demo-part)=
## The Part
"""


def test_plain_rewrites_each_kind_of_myst(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CHAPTERS", tmp_path)
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "demo.md").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "en" / "other.md").write_text("(sec-other)=\n# Other Page\n", encoding="utf-8")
    ctx = plain.Context("en", plain.targets("en"), "https://example.org/book/en/")
    out = plain.plain(SAMPLE, ctx)
    page = "https://example.org/book/en/chapters/"
    assert out.startswith("# Demo\n\nSee [The Part](" + page + "demo.html#sec-demo-part)")
    assert f"[the other page]({page}other.html)" in out  # the page's top: no anchor
    assert "or `{ref}` as code" in out and 'print("{ref}`kept` in code")' in out
    assert f"| table | with a [The Part]({page}demo.html#sec-demo-part) |" in out
    assert ("![A demo figure.](https://example.org/book/en/_images/demo.svg)\n\n"
            f"**Figure**: The caption, with [Other Page]({page}other.html).") in out
    assert "> **Note**\n>\n> A note with $x$ in it." in out
    assert "<details>\n<summary>Try it</summary>\n\nRun it.\n\n</details>" in out  # folded
    assert "```bash\necho hi\n```" in out and "$$a = b$$\n" in out
    for kind, pattern in MYST.items():
        assert not pattern.search(_without_code(out)), kind
    assert plain.targets("en")["fig-demo"] == plain.Target("demo", "fig-demo",
                                                           "The caption, with {ref}`sec-other`.")


def test_the_scan_finds_each_kind_of_myst():
    """The scan that every notebook passes finds MyST outside code, none inside code."""
    for text in ("See {ref}`sec-x`.", "(sec-x)=\n# T", "```{figure} a.svg\n```",
                 ":::{note}\nx\n:::", "a {{value:.2f}} b", "% comment", "{numref}`Fig %s <f>`"):
        assert any(p.search(_without_code(text)) for p in MYST.values()), text
    for text in ("`{ref}` as code", "```python\n{ref}`x`\n(sec-x)=\n```", "plain $x$ text"):
        assert not any(p.search(_without_code(text)) for p in MYST.values()), text


def test_refill_without_names_re_renders_every_chapter(monkeypatch):
    """``tools/book.py refill`` with no chapter names re-renders them all (no new run)."""
    import book
    from pipeline import execute

    asked = []
    monkeypatch.setattr(execute, "refill_all", lambda names, frameworks, **kw: asked.append(
        (names, frameworks)))
    assert book.main(["refill"]) == 0
    assert book.main(["refill", "--framework", "mxnet", "memory"]) == 0
    assert asked == [([], ["torch", "mxnet"]), (["memory"], ["mxnet"])]


# ---- the built site: the pages keep their MyST; the notebooks' links land on it ----


@pytest.fixture(scope="module")
def site() -> Path:
    """The built site (built here if no build is there yet)."""
    if not (SITE / "index.html").exists():
        pytest.importorskip("jupyter_book", reason="building the site needs jupyter-book")
        from pipeline.site import build
        build()
    return SITE


def _page(site: Path, lang: str, name: str) -> str:
    return (site / lang / "chapters" / f"{name}.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("relative", NOTEBOOKS)
def test_the_notebooks_links_and_images_exist_in_the_built_site(relative, site):
    lang = relative.split("/")[0]
    base = config.site_url()
    for match in LINK.finditer(_without_code(_prose(_read(relative)))):
        url = match["url"]
        if not url.startswith(base):
            continue
        path, _, anchor = url[len(base):].partition("#")
        assert path.startswith(f"{lang}/") and (site / path).is_file(), url
        if anchor:
            assert f'id="{anchor}"' in (site / path).read_text(encoding="utf-8"), url


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", sources.chapter_names())
def test_the_pages_render_their_myst(site, lang, name):
    """Cross-references as links, figures as images, framework prose in its containers;
    none of it left as text."""
    html = _page(site, lang, name)
    source = (config.CHAPTERS / lang / f"{name}.md").read_text(encoding="utf-8")
    text = re.sub(r"<pre.*?</pre>|<code.*?</code>", "", html, flags=re.S)
    assert "{ref}" not in text and ":::{" not in text and "{figure}" not in text
    if "{ref}`" in source:
        assert 'class="reference internal"' in html
    for figure in re.findall(r"```\{figure\} img/([\w.-]+)", source):
        assert f'src="../_images/{figure}"' in html, figure
    assert "fw fw-torch" in html and "fw fw-mxnet" in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_header_download_offers_the_framework_notebooks_only(site, lang):
    html = _page(site, lang, "async-computation")
    menu = html[html.index('class="dropdown-menu'):]
    menu = menu[:menu.index("</ul>")]
    downloads = re.findall(r'href="([^"]+)"', menu)
    assert downloads == ["../notebooks/torch/async-computation.ipynb",
                         "../notebooks/mxnet/async-computation.ipynb"], downloads
    for href in downloads:
        assert (site / lang / "chapters" / href).resolve().is_file()
    assert "_sources/" not in menu  # not the page's own two-framework notebook
