"""The Chinese edition speaks Chinese wherever a reader looks: in the outputs of its
notebooks, with consistent terms, and without typed chapter numbers (the table of contents
numbers the chapters; prose refers to them by title)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, sources  # noqa: E402
from pipeline.config import FRAMEWORKS  # noqa: E402

CHAPTERS = sources.chapter_names()

#: Three or more English words in a row: a sentence or a label meant for the reader.
ENGLISH_RUN = re.compile(r"\b[A-Za-z]{2,}(?:[ ,;:/-]+[A-Za-z]{2,}){2,}\b")
#: Output the reader sees but the book does not write: the frameworks' warnings and errors,
#: IPython's magics, a module's repr.
TOOL_LINE = re.compile(r"^\s*(\w+(Warning|Error|Exception)\b|Writing \S+$|Overwriting \S+$|"
                       r"Traceback|\(\w+\): [A-Z]\w*\(|[A-Z]\w*\($|\)$)")


#: Words that are names in any language: devices.
NAMES = {"cpu", "gpu", "cuda"}
#: A table printed by a profiler (torch's key_averages, MXNet's dumps): tool output.
PROFILER_TABLE = re.compile(r"^\s*(-{10,}|={10,})[\s=-]*$", re.M)


#: The report of PyTorch's CUDA sanitizer (CSAN), from its "====" rule to its error line.
SANITIZER_REPORT = re.compile(r"^={10,}\n(?:.*\n)*?.*CUDASanitizerErrors.*$", re.M)


def english_runs(text: str) -> list[str]:
    """The runs of English words in ``text`` that are not code, API names or tool output."""
    if PROFILER_TABLE.search(text) and re.search(r"^\s*Name\s{2,}", text, re.M):
        return []
    text = SANITIZER_REPORT.sub("", text)
    found = []
    for line in text.splitlines():
        if TOOL_LINE.match(line):
            continue
        line = re.sub(r"`[^`]*`|'[^']*'|\"[^\"]*\"|“[^”]*”", " ", line)  # quoted names, quotes
        line = re.sub(r"\b\w+(Error|Exception|Warning): .*", " ", line)  # a quoted error
        line = re.sub(r"\b\w+(\.\w+)+(\(\))?", " ", line)  # dotted API names, file names
        found += [m.group(0) for m in ENGLISH_RUN.finditer(line)
                  if not set(re.findall(r"[A-Za-z]+", m.group(0).lower())) <= NAMES]
    return found


def test_the_detector_finds_sentences_and_spares_code_and_tools():
    assert english_runs("the run was faster than before") == ["the run was faster than before"]
    assert english_runs("批量 32：759.2 ms（716.7–928.9）") == []
    assert english_runs("不能：“compile with USE_NCCL=1 to use nccl”") == []  # a quoted message
    assert english_runs("FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated") == []
    assert english_runs("用 torch.nn.parallel.scatter 与 d2l_ext.parallel.gather 拼起来") == []
    assert english_runs("Writing hogwild.py") == []
    assert english_runs("损失 syncs per step") == ["syncs per step"]
    assert english_runs("设备：cpu cpu cpu") == []
    assert english_runs("失败：MXNetError: could not create a primitive") == []
    table = "-----------  ------------\nName    Self CPU   CPU total\n-----------  ------------\n"
    assert english_runs(table) == []
    assert english_runs("Name    Self CPU   CPU total") == ["Name    Self CPU   CPU total"]
    report = ("--- stream_race.py：退出码 1\n" + "=" * 28 + "\nCSAN detected a possible data "
              "race on tensor\nAccess by stream 42 during kernel:\nreading from argument(s) "
              "self\ntorch.cuda._sanitizer.CUDASanitizerErrors: detected 1 errors\nthe end of "
              "it all\n")
    assert english_runs(report) == ["the end of it all"]
    assert english_runs('警告："called a synchronizing CUDA operation"') == []


def _outputs(nb) -> list[tuple[int, str]]:
    texts = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("name") == "stderr":  # the frameworks' logs and warnings
                continue
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            texts.append((index, "".join(text)))
    return texts


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_english_sentence_in_the_outputs_of_a_chinese_notebook(name, framework):
    path = config.NOTEBOOKS / "zh" / framework / f"{name}.ipynb"
    nb = nbformat.read(path, 4)
    english = [(index, run) for index, text in _outputs(nb) for run in english_runs(text)]
    assert english == [], (f"{path.relative_to(ROOT)}: English for the reader in cells "
                           f"(index, text): {english[:8]}")


#: Terms the Chinese edition does not use, and the one it uses instead.
AVOID = {
    "秩": "进程编号（rank）",
    "内核": "核函数（kernel）",
    "消毒器": "CUDA Sanitizer（CSAN）",
    "全规约": "全归约",
    "批归一化": "批量规范化",
    "批量归一化": "批量规范化",
    "准确度": "准确率",
    "GPU 内存": "显存",
    "本单元": "单元格",
}


#: 秩 is a matrix's rank (PowerSGD's low-rank approximation), never a process's.
MATRIX_RANK = re.compile(r"秩（rank）为|秩为|随秩|矩阵的秩")


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_the_chinese_edition_keeps_to_its_terms(name):
    text = (config.CHAPTERS / "zh" / f"{name}.md").read_text(encoding="utf-8")
    text = MATRIX_RANK.sub("", text)
    found = {term: AVOID[term] for term in AVOID if term in text}
    assert found == {}, f"zh/{name}.md: write {found}"


TYPED_NUMBER = {"en": re.compile(r"\b[Cc]hapters? \d"), "zh": re.compile(r"第\s*\d+\s*章")}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_prose_refers_to_chapters_by_title_not_by_a_typed_number(lang, name):
    """The table of contents numbers the chapters; a typed number goes stale when a chapter
    is added, so prose links chapters with {ref} (their titles)."""
    chapter = sources.parse(config.CHAPTERS / lang / f"{name}.md")
    prose = "\n".join(c.source for c in chapter.cells)
    assert TYPED_NUMBER[lang].findall(prose) == [], f"{lang}/{name}.md types chapter numbers"


def test_the_table_of_contents_numbers_the_chapters():
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert toc.get("options", {}).get("numbered") is True


#: How the Chinese edition links a chapter or section by its title: “{ref}`label`”一章 / 一节,
#: the title in quotes, no space around it (a space between two Chinese characters shows).
#: A link with words of its own, {ref}`文字 <label>`, is left as written.
ZH_REF = re.compile(r"“\{ref\}`[^`]+`”一[章节]")


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_the_chinese_edition_links_chapters_in_one_form(name):
    chapter = sources.parse(config.CHAPTERS / "zh" / f"{name}.md")
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    others = [m.group(0) for m in re.finditer(r".{0,4}\{ref\}`[^`<]+`.{0,4}", prose)
              if not ZH_REF.search(m.group(0))]  # `text <label>` links carry their own words
    assert others == [], f"zh/{name}.md: write “{{ref}}`label`”一章: {others}"


#: A unit written the English way in a Chinese output: "5.2 us", "0.56 sec" (a profiler's
#: table is tool output and keeps its own).
ENGLISH_UNIT = re.compile(r"\d\s*(us|sec|secs)\b")


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_outputs_of_a_chinese_notebook_write_units_in_chinese(name, framework):
    path = config.NOTEBOOKS / "zh" / framework / f"{name}.ipynb"
    nb = nbformat.read(path, 4)
    found = [(index, m.group(0)) for index, text in _outputs(nb)
             if not PROFILER_TABLE.search(text) for m in ENGLISH_UNIT.finditer(text)]
    assert found == [], f"{path.relative_to(ROOT)}: write 微秒/秒 (cells, text): {found[:8]}"
