"""d2l_ext.text: the shipped corpus and its training windows; d2l_ext.gpt_counts' names."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from d2l_ext import gpt_counts, text


def test_the_corpus_ships_with_its_provenance_and_is_the_books_english_text():
    data = text.book_corpus()
    assert data.dtype == np.uint8 and 100_000 < len(data) < 1_000_000
    decoded = data.tobytes().decode("utf-8")  # whole characters, no cut sequence
    assert "{{" not in decoded and "```" not in decoded and ":::" not in decoded
    assert "asynchronous" in decoded
    provenance = (resources.files("d2l_ext") / "data" / "corpus" / "PROVENANCE.md").read_text()
    assert "CC BY-SA 4.0" in provenance and "tools/make_corpus.py" in provenance
    assert f"{len(data):,} bytes" in provenance


@pytest.mark.parametrize("batch, seq", [(1, 1), (3, 17), (8, 256)])
def test_windows_are_consecutive_bytes_shifted_by_one(batch, seq):
    data = np.arange(1000, dtype=np.uint8)  # wraps at 256: values still consecutive mod 256
    X, Y = text.windows(data, batch, seq, np.random.default_rng(0))
    assert X.shape == Y.shape == (batch, seq) and X.dtype == Y.dtype == np.int64
    assert (Y[:, :-1] == X[:, 1:]).all()
    assert ((Y[:, -1] - X[:, -1]) % 256 == 1).all()


def test_windows_refuse_what_cannot_fit():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="shorter seq"):
        text.windows(np.zeros(10, np.uint8), 1, 10, rng)
    with pytest.raises(ValueError, match="at least 1"):
        text.windows(np.zeros(10, np.uint8), 0, 3, rng)
    X, _ = text.windows(np.zeros(11, np.uint8), 2, 10, rng)  # exactly fits
    assert X.shape == (2, 10)


def test_the_formula_terms_add_up_to_korthikantis_total():
    for s, b, h, a in [(2048, 1, 12288, 96), (256, 4, 256, 4), (1, 1, 8, 2)]:
        terms = gpt_counts.formula_terms(s, b, h, a)
        assert sum(terms.values()) == pytest.approx(gpt_counts.activation_bytes_per_layer(
            s, b, h, a))
    assert sum(x for x, _ in gpt_counts.FORMULA_TERMS.values()) == 34
    assert sum(y for _, y in gpt_counts.FORMULA_TERMS.values()) == 5


def test_every_term_has_a_name_in_both_languages():
    for term in [*gpt_counts.FORMULA_TERMS, *gpt_counts.EXTRA_TERMS]:
        name = gpt_counts.term_name(term)
        assert name.en.startswith(term.split(" (")[0].replace("weight copies", "bf16 copies"))
        assert name.zh and not name.zh.isascii()
    with pytest.raises(KeyError, match="unknown term"):
        gpt_counts.term_name("attention")
