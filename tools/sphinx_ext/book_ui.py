"""The interface strings of the themes in the edition's language.

sphinx-book-theme's zh_CN catalogue says 列印 (the Traditional Chinese word) for "print";
pydata-sphinx-theme's leaves "Color mode" and the copyright line in English; Jupyter Book
sets the search box's text to "Search this book..." in every language, and MyST-NB's prompt
on a collapsed cell is English. Here an edition's own wording goes in front of the themes'
catalogues (:class:`Overrides`), and the search box and the prompts get the edition's text.
The author line is set per language in ``_config.yml`` (``author_by_language``, read by
``tools/pipeline/site.py``); ``templates/author.html`` writes it without a space after a
full-width colon, and ``templates/toggle-*.html`` give the sidebar buttons' tooltips to the
catalogue (the theme writes them in English).
"""

from __future__ import annotations

import gettext
from pathlib import Path

from sphinx import locale

#: Per language, per message catalogue: the theme's English message -> the book's wording.
UI_STRINGS: dict[str, dict[str, dict[str, str]]] = {
    "zh": {
        "booktheme": {  # sphinx-book-theme
            "Print to PDF": "打印 / 另存为 PDF",  # the label book.js gives the item
            "Source repository": "源代码仓库",
        },
        "sphinx": {  # pydata-sphinx-theme's templates and Sphinx's own
            "Color mode": "颜色模式",
            "System Settings": "跟随系统",
            "Toggle primary sidebar": "显示或隐藏导航栏",  # templates/toggle-*.html
            "Toggle secondary sidebar": "显示或隐藏本页目录",
            "© Copyright %(copyright)s.": "© %(copyright)s 版权所有。",
            "Link to this heading": "链接到此标题",  # Sphinx's permalinks' tooltips
            "Link to this image": "链接到此图",
            "Link to this table": "链接到此表",
            "Link to this code": "链接到此代码",
            "Link to this equation": "链接到此公式",
            "Link to this definition": "链接到此定义",
        },
    },
}
#: Labels for screen readers that the themes and extensions write in English whatever the
#: language (MyST-NB's and sphinx-togglebutton's "Toggle hidden content", sphinx-book-theme's
#: navigation landmarks "Main" and "Page"): replaced in the written page (the ``content``
#: block of ``templates/layout.html``, the theme's frame and the page's body), and by
#: book.js in what scripts add.
ARIA_LABELS = {"zh": {"Toggle hidden content": "显示或隐藏内容", "Main": "主导航",
                      "Page": "本页"}}
#: The search box's placeholder per language (Jupyter Book's default is English only).
SEARCH_BAR_TEXT = {"en": "Search this book...", "zh": "搜索本书……"}
#: MyST-NB's prompts on a collapsed cell ("Show code cell source"), per language: its
#: ``{type}`` would put an English word into a Chinese prompt.
CELL_PROMPTS = {"zh": ("显示代码单元格", "隐藏代码单元格")}


class Overrides(gettext.NullTranslations):
    """A catalogue that answers its own ``strings`` and asks ``fallback`` for the rest."""

    def __init__(self, strings: dict[str, str], fallback: gettext.NullTranslations) -> None:
        super().__init__()
        self.strings = dict(strings)
        self.add_fallback(fallback)

    def gettext(self, message: str) -> str:
        if message in self.strings:
            return self.strings[message]
        return super().gettext(message)


def put_in_front(catalog: str, strings: dict[str, str]) -> Overrides:
    """Answer ``strings`` before the catalogue already registered under ``catalog``."""
    before = locale.translators.get(("general", catalog), gettext.NullTranslations())
    overrides = Overrides(strings, before)
    locale.translators["general", catalog] = overrides
    return overrides


def _override_catalogs(app) -> None:
    """Runs once the builder has made its templates (``builder-inited``): the themes'
    ``translate`` looks its catalogue up at each call; the templates' ``_`` and
    ``{% trans %}`` were bound to Sphinx's catalogue when the builder started, so they are
    bound again to the overriding one."""
    for catalog, strings in UI_STRINGS.get(app.config.book_lang, {}).items():
        overrides = put_in_front(catalog, strings)
        if catalog == "sphinx":
            app.translator = overrides
            templates = getattr(app.builder, "templates", None)
            environment = getattr(templates, "environment", None)
            if environment is not None:
                environment.install_gettext_translations(overrides)


#: The book's versions of theme templates, found before the themes' own.
TEMPLATES = Path(__file__).parent / "templates"


def _search_bar_prompts_and_templates(app, config) -> None:
    text = SEARCH_BAR_TEXT.get(config.book_lang)
    if text:
        config.html_theme_options = {**config.html_theme_options, "search_bar_text": text}
    if config.book_lang in CELL_PROMPTS:
        config.nb_code_prompt_show, config.nb_code_prompt_hide = CELL_PROMPTS[config.book_lang]
    config.templates_path = [str(TEMPLATES), *config.templates_path]


def _aria_labels(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The edition's labels for ``templates/layout.html`` (``book_aria_labels``)."""
    context["book_aria_labels"] = ARIA_LABELS.get(app.config.book_lang, {})


def setup(app) -> None:
    app.connect("config-inited", _search_bar_prompts_and_templates)
    app.connect("html-page-context", _aria_labels)
    app.connect("builder-inited", _override_catalogs)
