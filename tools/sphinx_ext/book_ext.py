"""Sphinx extension of the book: framework tabs, language switch, notebook links, search.

It tells each page, in ``<meta name="book-...">`` tags, where the same page is in
the other language and where its notebooks are; ``book.js`` builds the interface.
It also makes the Chinese edition's search find in-text terms (:class:`ChineseSearch`).
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx import search
from sphinx.search.zh import SearchChinese

FRAMEWORKS = ("torch", "mxnet")
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

# The browser splits a query the same way the index was split: runs of Chinese characters
# into overlapping pairs, everything else into words.
_SPLIT_QUERY = r"""
function splitQuery(query) {
  const terms = [];
  for (const term of query.split(/[^\p{Letter}\p{Number}_]+/u)) {
    const han = term.match(/\p{Script=Han}+/gu);
    if (!han) {
      if (term) terms.push(term);
      continue;
    }
    term.split(/\p{Script=Han}+/u).filter((rest) => rest).forEach((rest) => terms.push(rest));
    for (const run of han) {
      if (run.length === 1) terms.push(run);
      for (let i = 2; i <= run.length; i++) terms.push(run.slice(i - 2, i));
    }
  }
  return terms;
}
"""


class ChineseSearch(SearchChinese):
    """Chinese search that finds any in-text term of two or more characters.

    jieba (Sphinx's Chinese word segmenter) cuts 学习率 into 学习 + 率, so a search for
    学习率 finds nothing. Here every run of Chinese characters is also indexed as its
    overlapping character pairs (学习, 习率), and the browser splits the query the same
    way: a page matches when it holds every pair of the query.
    """

    js_splitter_code = _SPLIT_QUERY

    def split(self, input: str) -> list[str]:
        words = super().split(input)
        for run in HAN.findall(input):
            words += [run[i - 2:i] for i in range(2, len(run) + 1)]
        return words


def _page_context(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    cfg = app.config
    up = "../" * pagename.count("/")
    meta = {"lang": cfg.book_lang, "other-lang": cfg.book_other_lang,
            "other-lang-url": f"{up}../{cfg.book_other_lang}/{pagename}.html"}
    slug = cfg.html_theme_options.get("repository_url", "").rstrip("/").split("github.com/")[-1]
    branch = cfg.html_theme_options.get("repository_branch", "main")
    name = pagename.rsplit("/", 1)[-1]
    for fw in FRAMEWORKS:
        rel = f"notebooks/{cfg.book_lang}/{fw}/{name}.ipynb"
        if (Path(cfg.book_root) / rel).exists():
            meta[f"{fw}-notebook"] = rel
            meta[f"{fw}-download"] = f"{up}notebooks/{fw}/{name}.ipynb"
            host = ("https://colab.research.google.com/github" if fw == "torch"
                    else "https://studiolab.sagemaker.aws/import/github")
            meta[f"{fw}-launch"] = f"{host}/{slug}/blob/{branch}/{rel}"
    # sphinx-thebe registers its inline configuration script twice under Jupyter Book 1,
    # which makes browsers report a redeclared constant: keep one copy of each script.
    if "script_files" in context:
        seen, unique = set(), []
        for js in context["script_files"]:
            key = (str(getattr(js, "filename", js) or ""),
                   tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        context["script_files"] = unique
    tags = "".join(f'<meta name="book-{k}" content="{v}">\n' for k, v in meta.items())
    context["metatags"] = context.get("metatags", "") + tags


def setup(app):
    search.languages["zh"] = ChineseSearch
    app.add_config_value("book_lang", "en", "html")
    app.add_config_value("book_other_lang", "zh", "html")
    app.add_config_value("book_root", ".", "html")
    app.add_js_file("book.js")
    app.add_css_file("book.css")
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
