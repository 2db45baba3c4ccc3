"""d2l_ext.i18n: the reader's language in texts, tables and figures, and the capture that lets
one English run fill the Chinese edition too."""

from __future__ import annotations

import base64
import json
import pickle

import pytest

from d2l_ext import i18n
from d2l_ext.utils import text_table


@pytest.fixture
def lang(monkeypatch):
    """Set the reader's language; no capture unless a test asks for it."""
    monkeypatch.delenv("D2L_CAPTURE", raising=False)

    def set_lang(value: str) -> None:
        monkeypatch.setenv("D2L_LANG", value)

    return set_lang


def test_message_is_in_the_readers_language_and_keeps_both(lang):
    for reader, shown in (("en", "3 steps"), ("zh", "3 步"), ("fr", "3 steps")):
        lang(reader)
        text = i18n.message(en="3 steps", zh="3 步")
        assert text == shown and (text.en, text.zh) == ("3 steps", "3 步")
        assert f"{text}!" == f"{shown}!"
    assert pickle.loads(pickle.dumps(text)).zh == "3 步"


def test_a_label_is_chinese_only_where_a_chinese_font_exists(lang, monkeypatch):
    lang("zh")
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)  # a bare Colab
    assert i18n.label(en="time (ms)", zh="时间（毫秒）") == "time (ms)"
    monkeypatch.setattr(i18n, "cjk_font", lambda: "WenQuanYi Micro Hei")
    assert i18n.label(en="time (ms)", zh="时间（毫秒）") == "时间（毫秒）"
    lang("en")
    assert i18n.label(en="time (ms)", zh="时间（毫秒）") == "time (ms)"
    assert i18n.LABELS["time (ms)"] == "时间（毫秒）"


def test_widths_count_a_chinese_character_as_two_columns():
    assert i18n.display_width("ms/步") == 5
    assert i18n.pad("步", 4, left=True) == "步  " and i18n.pad("ab", 4, left=False) == "  ab"


def test_a_table_of_messages_is_aligned_in_either_language(lang):
    for reader in ("en", "zh"):
        lang(reader)
        table = text_table([i18n.message(en="loss", zh="损失函数"), "ms"],
                           [[i18n.message(en="original", zh="原始"), 1.5], ["sort", 12.25]],
                           ["", ".2f"], left=1)
        lines = table.splitlines()
        assert len({i18n.display_width(line) for line in lines}) == 1, table
        assert ("损失函数" in table) == (reader == "zh") and ("原始" in table) == (reader == "zh")


def test_while_capturing_texts_and_tables_are_recorded_for_the_chinese_edition(
        lang, monkeypatch, tmp_path):
    lang("en")
    monkeypatch.setenv("D2L_CAPTURE", str(tmp_path))
    monkeypatch.setattr(i18n, "_running", "cell-a")
    assert i18n.message(en="Correct.", zh="正确。") == "Correct."
    en_table = text_table([i18n.message(en="loss", zh="损失")], [["x"]], [""])
    monkeypatch.setattr(i18n, "_running", None)
    i18n.message(en="same", zh="same")  # nothing to translate: not recorded
    pairs = i18n.recorded(tmp_path)
    assert list(pairs) == ["cell-a"]
    assert ("Correct.", "正确。") in pairs["cell-a"]
    assert (en_table, "损失\n   x") in pairs["cell-a"]
    lines = (tmp_path / "texts.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["cell"] == "cell-a" for line in lines)


def test_a_figure_is_translated_only_inside_the_block(lang):
    plt = pytest.importorskip("matplotlib.pyplot")
    lang("en")
    fig, ax = plt.subplots()
    ax.set_xlabel(i18n.label(en="step", zh="步"))
    ax.set_title("not a label")
    ax.barh([i18n.label(en="copy", zh="复制")], [1.0])
    fig.canvas.draw()  # tick labels exist once drawn
    with i18n.translated(fig) as changed:
        texts = {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))}
        assert changed and {"步", "复制", "not a label"} <= texts and "step" not in texts
    assert ax.get_xlabel() == "step" and ax.get_title() == "not a label"
    plt.close(fig)


def test_category_names_stay_translated_when_the_figure_is_drawn_again(lang):
    """A bar chart's category names are tick labels that the axis's formatter makes again
    at every draw (savefig draws): the Chinese must survive the draw, and go afterwards."""
    plt = pytest.importorskip("matplotlib.pyplot")
    lang("en")
    fig, ax = plt.subplots()
    ax.barh([i18n.label(en="d2l's loop", zh="d2l 的循环"), "plain"], [1.0, 2.0])
    with i18n.translated(fig) as changed:
        fig.canvas.draw()
        assert changed
        assert [t.get_text() for t in ax.get_yticklabels()] == ["d2l 的循环", "plain"]
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["d2l's loop", "plain"]
    plt.close(fig)


def test_the_chinese_rendering_differs_from_the_english_one(lang, monkeypatch, tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    if i18n.cjk_font() is None:
        pytest.skip("no Chinese font (apt-get install fonts-wqy-microhei)")
    lang("en")
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_xlabel(i18n.label(en="seconds per epoch", zh="每轮秒数"))
    assert i18n.figure_metadata(fig, {"a": 1}) == {"a": 1}  # not capturing: nothing added
    monkeypatch.setenv("D2L_CAPTURE", str(tmp_path))
    metadata = i18n.figure_metadata(fig, {"a": 1})
    png = base64.b64decode(metadata["d2l_ext"]["zh"]["image/png"])
    assert metadata["a"] == 1 and png.startswith(b"\x89PNG")
    svg = i18n.chinese_rendering(fig, "svg")
    assert "每轮秒数" in svg or "<path" in svg
    assert ax.get_xlabel() == "seconds per epoch"
    plain, _ = plt.subplots()
    assert i18n.chinese_rendering(plain) is None  # nothing to translate
    plt.close("all")
