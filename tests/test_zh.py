"""The Chinese edition speaks Chinese wherever a reader looks: in the outputs of its
notebooks, with consistent terms, and without typed chapter numbers (the table of contents
numbers the chapters; prose refers to them by title)."""

from __future__ import annotations

import html
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
                       r"Traceback|\(\w+\): [A-Z]\w*\(|[A-Z]\w*\($|\)$|-{1,2}[A-Za-z])")


#: A line of generated code (C++ that torch.compile wrote): tool output.
CODE_LINE = re.compile(r"^\s*(#\s*(pragma|include)\b|.*[;{}]\s*$|.*::)|^\s*(extern|auto|for)\b")


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
        if TOOL_LINE.match(line) or CODE_LINE.match(line):
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
    assert english_runs('extern "C"  void  kernel(const float* in_ptr0,') == []  # generated
    assert english_runs("    #pragma omp parallel") == []
    assert english_runs("auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0);") == []
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
            if "text/html" in output.get("data", {}):  # a table shown with d2l.show
                texts.append((index, _html_text("".join(output.data["text/html"]))))
    return texts


def _html_text(markup: str) -> str:
    """The text an HTML output shows, a table's rows on lines of their own (a style sheet or
    a script shows nothing)."""
    markup = re.sub(r"<(style|script)\b.*?</\1>", "", markup, flags=re.S | re.I)
    markup = re.sub(r"</t[hd]>", "  ", re.sub(r"</tr>", "\n", markup))
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


def test_an_html_table_is_read_as_its_text():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("d2l.show(table)")])
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": "方式\n甲", "text/html": '<table class="d2l-table"><thead><tr>'
        '<th style="text-align: left">方式</th></tr></thead><tbody><tr>'
        '<td style="text-align: left">left &amp; nothing translated here</td></tr></tbody>'
        '</table>'})]
    assert [english_runs(text) for _, text in _outputs(nb)] == [
        [], ["nothing translated here"]]
    assert _html_text("<div><style>.x{display:grid}</style>显存<script>var shown = "
                      "'never shown';</script></div>") == "显存"


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
    "代价模型": "成本模型（cost model）",
    "开销模型": "成本模型（cost model）",
    "工作区": "工作空间（workspace）",
    "保留的显存": "预留的显存（reserved）",
    "列印": "打印",
}


#: 秩 is a matrix's rank (PowerSGD's low-rank approximation), never a process's.
MATRIX_RANK = re.compile(r"秩（rank）为|秩为|随秩|矩阵的秩")


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_the_chinese_edition_keeps_to_its_terms(name):
    text = (config.CHAPTERS / "zh" / f"{name}.md").read_text(encoding="utf-8")
    text = MATRIX_RANK.sub("", text)
    found = {term: AVOID[term] for term in AVOID if term in text}
    assert found == {}, f"zh/{name}.md: write {found}"


#: A half-width parenthesis that opens or closes in Chinese text: 用梯度累积(…) or （a) …
HALF_WIDTH_PAREN = re.compile(r"[\u4e00-\u9fff，。：；、][ \t]*\(|\)[\u4e00-\u9fff，。：；、]")
#: What is not Chinese text in a markdown cell: code, math, run values, links' addresses.
NOT_TEXT = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\{\{.*?\}\}|\]\([^)]*\)|<https?://[^>]*>",
                      re.S)


def half_width_parentheses(prose: str) -> list[str]:
    """The places in Chinese ``prose`` where a parenthesis is half-width."""
    text = NOT_TEXT.sub("``", prose)
    return [text[max(0, m.start() - 12):m.end() + 12] for m in HALF_WIDTH_PAREN.finditer(text)]


def test_the_parenthesis_detector_spares_code_math_and_links():
    assert half_width_parentheses("用梯度累积(gradient accumulation)少交换") != []
    assert half_width_parentheses("下面哪些：(a) `x + 1`") != []
    assert half_width_parentheses("调用 `f(x)` 后，形状 $(B, 10)$，见 [文档](https://a.b/c)") == []
    assert half_width_parentheses("梯度累积（gradient accumulation）；（a）`x + 1`") == []


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_chinese_prose_writes_full_width_parentheses(name):
    chapter = sources.parse(config.CHAPTERS / "zh" / f"{name}.md")
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    assert half_width_parentheses(prose) == [], f"zh/{name}.md: write （…）"


#: The message catalogues (d2l.say) that hold what the chapters' code prints.
CATALOGUES = sorted((ROOT / "d2l_ext" / "messages").glob("*.toml"))
#: A call written out in a printed text (``np.zeros((1000, 1000))``, no Chinese inside): code.
CALL = re.compile(r"[A-Za-z_][\w.]*\((?:[^()\u4e00-\u9fff]|\([^()]*\))*\)")
#: A unit after a number or a filled-in value: "3.1 ms", "{t:.1f} us".
UNIT_AFTER_VALUE = re.compile(r"(?:\d|\})\s*(?:ms|us|μs|sec|secs)\b")


def catalogue_problems(zh: str) -> list[str]:
    """What a Chinese text of a message catalogue writes against the book's rules: an avoided
    term, a half-width parenthesis, an English unit."""
    text = CALL.sub("``", re.sub(r"\{[^{}]*\}", "{}", MATRIX_RANK.sub("", zh)))
    return ([f"write {AVOID[term]} for {term}" for term in AVOID if term in MATRIX_RANK.sub("", zh)]
            + [f"（…）: {at}" for at in half_width_parentheses(text)]
            + [f"unit: {unit}" for unit in UNIT_AFTER_VALUE.findall(zh)])


def test_the_catalogue_check_finds_terms_parentheses_and_units():
    assert catalogue_problems("每步 {ms:.1f} ms(中位数)，代价模型") == [
        "write 成本模型（cost model） for 代价模型", "（…）: 每步 {} ms(中位数)，代价模型",
        "unit: } ms"]
    assert catalogue_problems("np.zeros((1000, 1000))：占用 {mib} MiB；PowerSGD 秩为 {rank}") == []


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda path: path.stem)
def test_the_message_catalogues_write_the_books_chinese(path):
    import tomllib

    messages = tomllib.loads(path.read_text(encoding="utf-8"))
    found = {key: catalogue_problems(text["zh"]) for key, text in messages.items()
             if isinstance(text, dict) and isinstance(text.get("zh"), str)}
    assert {key: problems for key, problems in found.items() if problems} == {}, path.name


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


#: How the Chinese edition links a chapter, section or page by its title:
#: “{ref}`label`”一章 / 一节 / 一页, the title in quotes, no space around it (a space
#: between two Chinese characters shows).
#: A link with words of its own, {ref}`文字 <label>`, is left as written.
ZH_REF = re.compile(r"“\{ref\}`[^`]+`”一[章节页]")


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_the_chinese_edition_links_chapters_in_one_form(name):
    chapter = sources.parse(config.CHAPTERS / "zh" / f"{name}.md")
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    others = [m.group(0) for m in re.finditer(r".{0,4}\{ref\}`[^`<]+`.{0,4}", prose)
              if not ZH_REF.search(m.group(0))]  # `text <label>` links carry their own words
    assert others == [], f"zh/{name}.md: write “{{ref}}`label`”一章: {others}"


#: A unit written the English way in a Chinese output: "5.2 us", "3.1 ms", "0.56 sec" (a profiler's
#: table is tool output and keeps its own).
ENGLISH_UNIT = re.compile(r"\d\s*(ms|us|sec|secs)\b")


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_outputs_of_a_chinese_notebook_write_units_in_chinese(name, framework):
    path = config.NOTEBOOKS / "zh" / framework / f"{name}.ipynb"
    nb = nbformat.read(path, 4)
    found = [(index, m.group(0)) for index, text in _outputs(nb)
             if not PROFILER_TABLE.search(text) for m in ENGLISH_UNIT.finditer(text)]
    assert found == [], f"{path.relative_to(ROOT)}: write 微秒/秒 (cells, text): {found[:8]}"
