"""Every GPU figure that a page shows says where it comes from (issue #18).

Two kinds of GPU evidence appear on the pages of a book whose own runs may have no GPU:

* measurements published by others, quoted in a markdown table in a section whose heading
  says "On a GPU" (Chinese: "GPU 上"): every row of such a table names its device and its
  source, in both editions, and the two editions have the same tables;
* figures that a page computes from the GPU traces shipped in ``d2l_ext/data/gpu_traces``:
  the page computes the figures that the trace module's author found, and labels its tables
  and figures with the trace's device and source.
"""

from __future__ import annotations

import contextlib
import io
import re
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from page_cells import cell_with_presentation  # noqa: E402
from pipeline import config, sources  # noqa: E402

from d2l_ext import catalogue, gputrace, i18n, trace  # noqa: E402
from d2l_ext.utils import show, text_table  # noqa: E402

CHAPTERS = sources.chapter_names()
#: The d2l names that the chapters' cells run here use.
D2L = SimpleNamespace(message=i18n.message, label=i18n.label, say=catalogue.say,
                      figure_text=catalogue.figure_text, show=show, listing=catalogue.listing)
#: Chapters that must have a table of published GPU measurements.
GPU_PAGES = ["async-computation", "multi-gpu-concise"]
#: Chapters whose tables quote measurements published outside d2l (blog posts, articles).
QUOTING_PAGES = ["tuning-tips", "host-device-sync", "gpu-basics"]
GPU_HEADING = re.compile(r"on a gpu|gpu 上", re.IGNORECASE)
SOURCE_COLUMN = re.compile(r"source|来源|出处", re.IGNORECASE)
DEVICE_COLUMN = re.compile(r"device|gpu|设备|硬件", re.IGNORECASE)
FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.S | re.M)


# ---------------------------------------------------------------- the tables of a chapter
def _cells(line: str) -> list[str]:
    """The cells of a markdown table row (a ``|`` inside backticks belongs to its cell)."""
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return cells + [cell.strip()]


def gpu_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """The markdown tables in the sections of ``text`` (a chapter source) whose heading, or
    an enclosing heading, says "On a GPU" / "GPU 上": ``(heading, header, rows)`` each.
    Code cells and other fenced blocks are not prose and are skipped."""
    prose = FENCE.sub("", text)
    found, stack = [], []  # stack: the (level, heading) pairs enclosing the current line
    lines = prose.splitlines()
    i = 0
    while i < len(lines):
        heading = re.match(r"^(#+)\s+(.*)$", lines[i])
        if heading:
            level = len(heading.group(1))
            stack = [(lv, h) for lv, h in stack if lv < level] + [(level, heading.group(2))]
        elif lines[i].lstrip().startswith("|"):
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            if any(GPU_HEADING.search(h) for _, h in stack):
                rows = [_cells(line) for line in block
                        if not re.fullmatch(r"[\s|:-]+", line)]  # the separator line
                found.append((stack[-1][1], rows[0], rows[1:]))
            continue
        i += 1
    return found


def problems(text: str) -> list[str]:
    """What is wrong with the GPU tables of a chapter source: a table without a source or a
    device column, a row whose source or device is empty, a row of the wrong width."""
    wrong = []
    for heading, header, rows in gpu_tables(text):
        source = [i for i, h in enumerate(header) if SOURCE_COLUMN.search(h)]
        device = [i for i, h in enumerate(header) if DEVICE_COLUMN.search(h)]
        if not source:
            wrong.append(f"{heading!r}: the table {header} has no source column")
        if not device:
            wrong.append(f"{heading!r}: the table {header} has no device column")
        for row in rows:
            if len(row) != len(header):
                wrong.append(f"{heading!r}: {row} has {len(row)} cells, not {len(header)}")
                continue
            for column, what in ((source, "source"), (device, "device")):
                if column and not re.search(r"\w", row[column[0]]):
                    wrong.append(f"{heading!r}: {row[0]!r} names no {what}")
    return wrong


def _text(lang: str, name: str) -> str:
    return (config.CHAPTERS / lang / f"{name}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", CHAPTERS)
def test_every_gpu_figure_in_a_table_names_its_device_and_source(lang, name):
    assert problems(_text(lang, name)) == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_both_editions_have_the_same_gpu_tables(name):
    en, zh = (gpu_tables(_text(lang, name)) for lang in ("en", "zh"))
    assert [(len(h), len(r)) for _, h, r in en] == [(len(h), len(r)) for _, h, r in zh]
    for (_, _, en_rows), (_, _, zh_rows) in zip(en, zh):
        links = [re.findall(r"\]\((https?://[^)]+)\)", " ".join(row)) for row in en_rows]
        assert links == [re.findall(r"\]\((https?://[^)]+)\)", " ".join(row))
                         for row in zh_rows], f"{name}: the editions cite different sources"


#: What a quoted figure's source links to: d2l's notebooks at the commit the figure was found
#: in; a published article or its programs elsewhere.
D2L_COMMIT_LINK = r"\]\(https://github\.com/d2l-ai/[^)]+/blob/[0-9a-f]{40}/"
ANY_LINK = r"\]\(https://[^)]+\)"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name, link", [(name, D2L_COMMIT_LINK) for name in GPU_PAGES]
                         + [(name, ANY_LINK) for name in QUOTING_PAGES])
def test_the_gpu_pages_quote_published_measurements_with_links(lang, name, link):
    tables = gpu_tables(_text(lang, name))
    assert tables, f"{lang}/{name}.md has no table under an 'On a GPU' heading"
    for _, header, rows in tables:
        source = next(i for i, h in enumerate(header) if SOURCE_COLUMN.search(h))
        assert rows and all(re.search(link, row[source]) for row in rows), \
            f"{lang}/{name}.md: each quoted figure links to its source"


GOOD = """# Demo

## Timing

| what | time |
| --- | --- |
| no source needed here | 1 s |

(sec-demo-gpu)=
## On a GPU: Something

```{code-cell} ipython3
# | a | comment | in code |
```

### Published GPU measurements

| what ran | time | device | source |
| --- | --- | --- | --- |
| a loop `a | b` | 0.1 s | one GPU | [repo @ abc](https://github.com/x/y) |

## Summary

| a | b |
| --- | --- |
| 1 | 2 |
"""


def test_the_table_check_finds_the_tables_and_catches_what_is_missing():
    (heading, header, rows), = gpu_tables(GOOD)
    assert heading == "Published GPU measurements"
    assert header == ["what ran", "time", "device", "source"]
    assert rows == [["a loop `a | b`", "0.1 s", "one GPU", "[repo @ abc](https://github.com/x/y)"]]
    assert problems(GOOD) == []
    no_source = GOOD.replace("| [repo @ abc](https://github.com/x/y) |", "|  |")
    assert problems(no_source) == ["'Published GPU measurements': 'a loop `a | b`' names no source"]
    no_column = GOOD.replace("| device | source |", "| device | where |")
    assert "has no source column" in problems(no_column)[0]
    no_device = GOOD.replace("| one GPU |", "| – |")
    assert problems(no_device) == ["'Published GPU measurements': 'a loop `a | b`' names no device"]
    short = GOOD.replace("| one GPU | [repo", "| [repo")
    assert "has 3 cells, not 4" in problems(short)[0]
    chinese = GOOD.replace("## On a GPU: Something", "## GPU 上的实况")
    chinese = chinese.replace("source |", "来源 |")
    assert len(gpu_tables(chinese)) == 1 and problems(chinese) == []
    assert gpu_tables(GOOD.replace("On a GPU", "On a CPU")) == []


# ---------------------------------------------------------------- figures from the traces
def _run_trace_cells(name: str, lang: str, monkeypatch) -> tuple[dict, str]:
    """Run the shared code cells of chapter ``name`` that read the shipped GPU traces, in
    the reader's language ``lang``; their names and what they printed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)  # labels: the English, as captured
    chapter = sources.parse(config.CHAPTERS / "en" / f"{name}.md")
    cells = [c.source for c in chapter.cells if c.kind == "code" and c.framework is None
             and ("gputrace." in c.source or "trace.plot_timeline(" in c.source)]
    assert cells, f"{name}: no shared cell reads the GPU traces"
    names = {"gputrace": gputrace, "trace": trace, "statistics": statistics, "plt": plt,
             "text_table": text_table, "d2l": D2L}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for source in cells:
            exec(source.replace("plt.show()", ""), names)
    plt.close("all")
    return names, out.getvalue()


def _figure_texts(fig) -> str:
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


def test_the_async_page_measures_what_the_traces_hold(monkeypatch):
    """The figures the module's author computed: ResNet-50 on a V100, step 7, with 4 loader
    workers and with none; the AlexNet benchmark's timed forward pass on an A100."""
    ns, printed = _run_trace_cells("async-computation", "en", monkeypatch)
    four, zero, alexnet = ns["four"], ns["zero"], ns["alexnet"]
    assert (four["lead"]["median"], four["lead"]["max"], four["queue"]["max"]) == (
        3411, 23068, 489)
    assert four["queue"]["mean"] == pytest.approx(76.5, abs=0.05)
    assert four["queue"]["empty_fraction"] == pytest.approx(0.154, abs=0.0005)
    assert (zero["lead"]["median"], zero["queue"]["max"]) == (10212, 568)
    assert zero["queue"]["empty_fraction"] == pytest.approx(0.418, abs=0.0005)
    assert (alexnet["lead"]["count"], alexnet["lead"]["median"], alexnet["queue"]["max"]) == (
        40, 878.5, 19)  # the measured window, not the warm-up with its 3 s launch
    assert 0.8 < ns["in_malloc"] < 1  # the prose: the host sat in cudaMalloc
    for trace_name in ns["runs"]:
        assert f"Source: {gputrace.provenance(trace_name)}." in printed
    title = _figure_texts(ns["fig"])
    _, gpu, source, licence = gputrace.SHIPPED["resnet50_v100_num_workers_4"]
    assert gpu in title and source in title and licence in title


def test_the_multi_gpu_page_measures_what_the_trace_holds(monkeypatch):
    """Rank 0 of 128: the compute stream, the NCCL streams, the overlap per step, and which
    collective each NCCL kernel belongs to (the claims the prose makes about them)."""
    ns, printed = _run_trace_cells("multi-gpu-concise", "en", monkeypatch)
    assert ns["compute"] == 7 and ns["nccl"] == [84, 203]
    overlaps = [gputrace.overlap(ns["events"], 7, 84, s.start_us, s.end_us) for s in ns["steps"]]
    assert overlaps == [23169, 36148]
    assert {op: (ks[0].stream, len(ks)) for op, ks in ns["kernels"].items()} == {
        "all_to_all": (84, 4), "all_reduce": (84, 4), "_all_gather_base": (203, 2)}
    assert 0 < ns["hidden"]["all_reduce"] < ns["total"]["all_reduce"] / 2
    assert ns["hidden"]["_all_gather_base"] == 0
    # the idle time split by the launches: most of it had launched work waiting ...
    assert [(s.launched_us, s.empty_us) for s in ns["idle_in"]] == [(205508, 123124),
                                                                     (195561, 158391)]
    # ... the longest gap nearly all of it: kernels on the compute stream, launched early
    assert ns["longest_split"] == gputrace.IdleSplit(56227, 387)
    assert len(ns["waiting"]) == 38 and ns["waiting_streams"] == [ns["compute"]]
    assert {link.work.kind for link in ns["waiting"]} == {"kernel", "memset"}
    assert ns["first_wait_ms"] < 1
    assert ns["ordering"] == 0  # "none of the calls that record an event, wait or synchronise"
    assert "calls that record an event, wait for one or synchronise: 0." in printed
    events = ns["events"]
    for link in gputrace.launches(events):  # "launched ... while gradients were accumulated"
        if link.work in ns["kernels"]["all_reduce"]:
            assert any(e.name.startswith("autograd::engine::evaluate_function: torch::autograd"
                                         "::AccumulateGrad")
                       and e.thread == link.call.thread
                       and e.start_us <= link.call.start_us <= e.end_us
                       for e in gputrace.host(events))
    assert "Source: nccl_rank0_sampled:" in printed and "rank 0 of 128, nccl" in printed
    title = _figure_texts(ns["fig"])
    _, _, source, licence = gputrace.SHIPPED["nccl_rank0_sampled"]
    assert "likely an A100" in title and source in title and licence in title


@pytest.mark.parametrize("name", GPU_PAGES)
def test_the_trace_cells_speak_chinese(name, monkeypatch):
    """The Chinese reader's tables and source lines: no English sentence, the source named."""
    from test_zh import english_runs

    _, printed = _run_trace_cells(name, "zh", monkeypatch)
    assert english_runs(printed) == []
    assert "来源：" in printed and "许可证" in printed


def _run_cells_containing(name: str, marker: str, lang: str, monkeypatch,
                          framework: str | None = None) -> tuple[dict, str]:
    """Run the code cell of chapter ``name`` (of ``framework``, or shared) that contains
    ``marker`` with its collapsed presentation, with the names they use; their names and
    what they printed."""
    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    chapter = sources.parse(config.CHAPTERS / "en" / f"{name}.md")
    code = cell_with_presentation(chapter.cells, marker, framework)
    names = {"gputrace": gputrace, "text_table": text_table, "d2l": D2L}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, names)
    return names, out.getvalue()


def test_the_tuning_page_measures_what_the_loader_traces_hold(monkeypatch):
    """The tuning-tips chapter's claims about the two ResNet-50 traces: the host in the loader and
    the GPU
    idle in one span without workers; short spans, none long, with four."""
    ns, _ = _run_cells_containing("tuning-tips", "def waiting_for_data", "en", monkeypatch)
    zero, four = ns["zero_w"], ns["four_w"]
    assert zero["batch"] == four["batch"] == 32
    assert [round(s.duration_us / 1e3, 1) for s in zero["steps"]] == [174.0, 176.9, 181.3]
    assert round(zero["host_loading_us"] / 1e3, 1) == 73.4
    assert round(zero["idle_loading_us"] / 1e3, 1) == 61.3  # "almost all in one span"
    assert round(zero["idle"][0].duration_us / 1e3, 1) == 60.9
    assert zero["idle"][0].doing.startswith("enumerate(DataLoader)")
    assert four["step"].duration_us < zero["step"].duration_us
    assert four["idle"][0].duration_us < 2000 and four["long_idle"] == 92  # spans, not one
    assert round(four["long_idle_us"] / 1e3, 1) == 16.8
    _, zh = _run_cells_containing("tuning-tips", "def waiting_for_data", "zh", monkeypatch)
    from test_zh import english_runs
    assert english_runs(zh) == []


def test_the_gpu_basics_page_measures_what_the_stream_trace_holds(monkeypatch):
    """The GPU-basics chapter's claims about the join in the A100 trace: the event recorded after
    the
    stream it waits on had finished, the joined product started as fast as the one that
    waited for nothing, no two streams overlapped, and cudaMalloc outlasted a product."""
    ns, printed = _run_cells_containing("gpu-basics-streams", "gputrace.joins(", "en", monkeypatch,
                                        framework="torch")
    join, after, unjoined = ns["join"], ns["after"], ns["unjoined"]
    assert (join.stream, join.on_stream) == (24, 20)
    assert after.work.kind == "kernel" and after.work.stream == 24
    assert unjoined and unjoined[0].work.stream == 28
    assert max(w.end_us for w in ns["waited_for"]) < join.record.start_us
    lag = after.work.start_us - after.call.start_us
    control = unjoined[0].work.start_us - unjoined[0].call.start_us
    assert abs(lag - control) < 5  # "as stream 28's ... did"
    assert ns["streams_overlap"] == 0
    product = max(link.work.duration_us for link in ns["kernels"])
    assert min(ns["mallocs"]) > product  # "longer than a product ran"
    assert "Source: event_sync_multi_stream_a100:" in printed
