"""d2l_ext.gpu_runs: the book's GPU figures kept as data, shown beside every later run, and
stored by the pipeline only from a full-size run on a GPU."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from d2l_ext import gpu_runs
from d2l_ext.i18n import Text, message

ROOT = Path(__file__).resolve().parents[1]

RUN = {"machine": "1 x NVIDIA H100 80GB HBM3", "gpus": 1, "gpu": "NVIDIA H100 80GB HBM3",
       "framework": "PyTorch 2.11.0+cu130", "date": "2026-11-24", "python": "3.12.3"}


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_runs, "RECORDS", tmp_path)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.delenv("D2L_CODE_VERSION", raising=False)

    def keep(chapter: str, figures, code_version: str = "abc") -> None:
        record = gpu_runs.GpuRun(chapter, RUN, "ec40dc2", code_version,
                                 tuple(gpu_runs.Figure(*f) for f in figures))
        gpu_runs.path(chapter).write_text(gpu_runs.to_json(record), encoding="utf-8")

    return keep


def figures(t1: float, extra: bool = False):
    rows = [(message(en="issue one operation, t1 (µs)", zh="发出一个操作 t1（微秒）"), t1, ".2f")]
    if extra:
        rows.append((message(en="new figure", zh="新数字"), 3, "d"))
    return rows


def test_without_a_record_the_table_shows_this_run_and_says_so(records, capsys):
    assert gpu_runs.table("demo", False, figures(40.123)) is None
    out = capsys.readouterr().out
    assert "this run (CPU)" in out and "40.12" in out
    assert "keeps no GPU run of this chapter yet" in out


def test_a_cpu_run_shows_the_kept_gpu_figures_beside_its_own(records, capsys):
    records("demo", [("issue one operation, t1 (µs)", "发出一个操作 t1（微秒）", 12.56, ".2f"),
                     ("an old figure", "旧数字", 7, "d")])
    record = gpu_runs.table("demo", False, figures(40.123, extra=True))
    lines = capsys.readouterr().out.splitlines()
    assert "the book's GPU run, 2026-11-24" in lines[0]
    row = next(x for x in lines if x.startswith("issue one operation"))
    assert row.split()[-2:] == ["40.12", "12.56"]
    assert next(x for x in lines if x.startswith("new figure")).split()[-1] == "\u2013"
    assert next(x for x in lines if x.startswith("an old figure")).split()[-2:] == ["\u2013", "7"]
    assert ("1 \u00d7 NVIDIA H100 80GB HBM3, PyTorch 2.11.0+cu130, 2026-11-24, commit ec40dc2"
            in lines[-1])
    assert record.value("an old figure") == 7
    with pytest.raises(KeyError, match="has no figure 'missing'"):
        record.value("missing")


def test_the_table_says_whether_the_record_came_from_this_code(records, capsys, monkeypatch):
    records("demo", [("issue one operation, t1 (µs)", "发出一个操作 t1（微秒）", 12.56, ".2f")],
            code_version="v1")
    for running, says in ((None, "(the chapter's code)"), ("v1", "(the code on this page)"),
                          ("v2", "an earlier version of this chapter's code")):
        if running:
            monkeypatch.setenv("D2L_CODE_VERSION", running)
        gpu_runs.table("demo", False, figures(1.0))
        assert says in capsys.readouterr().out


def test_the_chinese_table_and_sentence(records, capsys, monkeypatch):
    monkeypatch.setenv("D2L_LANG", "zh")
    records("demo", [("issue one operation, t1 (µs)", "发出一个操作 t1（微秒）", 12.56, ".2f")])
    gpu_runs.table("demo", False, figures(1.0))
    out = capsys.readouterr().out
    assert "本次运行（CPU）" in out and "本书在 GPU 上的运行（2026-11-24）" in out
    assert "发出一个操作 t1（微秒）" in out and "本书在 GPU 上的运行：1 块 NVIDIA H100" in out
    assert "issue one" not in out


def test_a_capturing_gpu_run_hands_its_figures_to_the_pipeline(records, tmp_path, monkeypatch,
                                                               capsys):
    capture = tmp_path / "capture"
    capture.mkdir()
    monkeypatch.setenv("D2L_CAPTURE", str(capture))
    gpu_runs.table("demo", False, figures(1.0))
    assert not (capture / gpu_runs.CAPTURED).exists()  # a CPU run keeps nothing
    gpu_runs.table("demo", True, figures(12.5))
    captured = json.loads((capture / gpu_runs.CAPTURED).read_text(encoding="utf-8"))
    assert captured == {"chapter": "demo", "figures": [
        {"en": "issue one operation, t1 (µs)", "zh": "发出一个操作 t1（微秒）", "value": 12.5,
         "format": ".2f"}]}
    assert "this run (GPU)" in capsys.readouterr().out


def test_figures_are_checked_when_they_are_given(records):
    with pytest.raises(TypeError, match="d2l.message"):
        gpu_runs.table("demo", False, [("plain string", 1.0)])
    with pytest.raises(ValueError, match="same label"):
        gpu_runs.table("demo", False, figures(1.0) + figures(2.0))
    with pytest.raises(ValueError, match="Unknown format code|Invalid format"):
        gpu_runs.table("demo", False, [(Text("a", "甲"), "text", ".2f")])
    with pytest.raises(ValueError, match="label, value"):
        gpu_runs.table("demo", False, [(Text("a", "甲"),)])
    with pytest.raises(ValueError, match="could not convert"):
        gpu_runs.table("demo", False, [(Text("a", "甲"), "text", "~3")])
    gpu_runs.table("demo", False, [(Text("a", "甲"), 1523.7, "~3")])  # 1,524, no exponent


def test_the_shipped_records_are_complete_and_name_their_source():
    for file in sorted(gpu_runs.RECORDS.glob("*.json")):
        record = gpu_runs.load(file.stem)
        assert record.chapter == file.stem
        assert (ROOT / "chapters" / "en" / f"{file.stem}.md").exists()
        assert record.run["gpus"] >= 1 and record.run["gpu"] and record.run["framework"]
        assert record.commit and record.code_version and record.figures
        for figure in record.figures:
            assert figure.en and figure.zh and figure.shown()
        assert gpu_runs.to_json(record) == file.read_text(encoding="utf-8")


# ------------------------------------------------------------------- the pipeline's part
nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("nbclient", reason="the book tools need the full environment")
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, execute  # noqa: E402

SOURCE = """# {title}

```{{code-cell}} ipython3
from d2l_ext import gpu_runs
from d2l_ext.i18n import message
import os
gpu_runs.table("demo", True, [(message(en="answer", zh="答案"), 42, "d")])
print(os.environ["D2L_CODE_VERSION"])
```
"""


@pytest.mark.parametrize("gpus, smoke, kept", [(1, False, True), (0, False, False),
                                               (1, True, False)])
def test_the_pipeline_keeps_a_record_from_a_full_gpu_run_only(tmp_path, monkeypatch, gpus,
                                                               smoke, kept):
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(gpu_runs, "RECORDS", tmp_path / "records")
    for lang, title in (("en", "Demo"), ("zh", "演示")):
        path = tmp_path / "chapters" / lang / "demo.md"
        path.parent.mkdir(parents=True)
        path.write_text(SOURCE.format(title=title), encoding="utf-8")
    fake = dict(RUN, gpus=gpus, cpu="CPU", driver="", cuda="", platform="Linux")
    monkeypatch.setattr(execute, "probe",
                        lambda fw: f"import json; print(json.dumps({json.dumps(fake)}))")
    written = execute.execute("demo", "torch", smoke=smoke)
    record_file = tmp_path / "records" / "demo.json"
    assert record_file.exists() is kept
    assert (record_file in written) is kept
    nb = nbformat.read(tmp_path / "notebooks" / "en" / "torch" / "demo.ipynb", 4)
    version = nb.cells[-1].outputs[-1]["text"].strip().splitlines()[-1]
    if kept:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        assert record["code_version"] == version and len(version) == 16
        assert record["run"]["gpu"] == RUN["gpu"] and record["run"]["size"] == "full"
        assert record["figures"] == [{"en": "answer", "zh": "答案", "value": 42, "format": "d"}]
        assert record["commit"]


def test_the_async_record_lines_up_with_the_chapters_table():
    """The figures kept from the book's H100 run of the async-computation chapter (read from its
    executed notebook
    at ec40dc2) carry the labels of figures that the chapter's table prints at full size, so
    that the table shows them side by side; figures that run measured wrongly are not kept."""
    record = gpu_runs.load("async-computation")
    assert record is not None and record.commit == "ec40dc2" and record.run["gpus"] == 1
    from d2l_ext import catalogue

    source = (ROOT / "chapters" / "en" / "async-computation.md").read_text(encoding="utf-8")
    start = source.index("key_figures = {")
    cell = source[start:source.index("```", start)]
    labels = {catalogue.entry(key)["en"]
              for key in re.findall(r'd2l\.say\("(async-computation/[\w-]+)"', cell)}
    for figure in record.figures:
        assert figure.en.replace("10,000", "{num_ops:,}") in labels, figure.en
    assert not any(f.en.startswith(("t3", "torch.mm")) for f in record.figures)


def test_a_device_other_than_a_cpu_or_cuda_is_named_and_not_captured(records, capsys,
                                                                     monkeypatch, tmp_path):
    monkeypatch.setenv("D2L_LANG", "en")
    monkeypatch.setattr(gpu_runs, "capture_dir", lambda: tmp_path)
    gpu_runs.table("demo", "mps", figures(1.0))
    assert "this run (MPS)" in capsys.readouterr().out
    assert not (tmp_path / gpu_runs.CAPTURED).exists()
    gpu_runs.table("demo", "cuda", figures(1.0))
    assert "this run (GPU)" in capsys.readouterr().out
    assert (tmp_path / gpu_runs.CAPTURED).exists()
