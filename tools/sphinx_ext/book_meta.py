"""What a page tells search engines and link previews, and its "report a problem" link.

Every page gets a meta description (its first paragraph as plain text, without formulas, from
the sentence that says what the page does), OpenGraph tags, ``<link rel="alternate"
hreflang>`` to the same page in both editions and, when the site's address is configured
(``html.baseurl`` in ``_config.yml``), absolute URLs and a canonical link (Sphinx writes that
one from ``html_baseurl``). The footer of every page links a new issue in the repository set
in ``_config.yml``, in the page's language, prefilled with the page's title and address.
"""

from __future__ import annotations

import html
import re
import unicodedata
from urllib.parse import quote, urlencode, urlparse

from docutils import nodes
from sphinx.locale import _

#: OpenGraph locales and hreflang codes of the editions.
OG_LOCALE = {"en": "en_US", "zh": "zh_CN"}
HREFLANG = {"en": "en", "zh": "zh-Hans"}
#: The edition search engines offer a reader whose language is neither.
DEFAULT_LANG = "en"
#: About what search engines show, in columns (a Chinese character takes two); one sentence
#: may run longer.
DESCRIPTION_WIDTH = 200
HIDDEN = "\0"  # stands for a formula in a paragraph's text
#: A sentence that says what the page (or its chapter) does; a description starts there when
#: the sentences before it (about another chapter, say) would not fit beside it.
OWN_OPENING = re.compile(r"(This|this) (page|chapter)\b|本页|本章")

REPORT = {
    "en": {"link": "Report a problem with this page",
           "title": "Problem on the page “{title}”",
           "body": "Page: {url}\n\nWhat is wrong, and where on the page:\n"},
    "zh": {"link": "报告本页的问题",
           "title": "【页面问题】{title}",
           "body": "页面：{url}\n\n问题是什么，在页面的哪个位置：\n"},
}


def _text(node: nodes.Node) -> str:
    """The text of ``node`` with every formula replaced by HIDDEN (inline code keeps its
    text: "fusion by ``torch.compile``" must not read "fusion by")."""
    if isinstance(node, (nodes.math, nodes.raw, nodes.footnote_reference)):
        return HIDDEN
    if isinstance(node, nodes.literal):
        return node.astext()
    if isinstance(node, nodes.Text):
        return node.astext()
    return "".join(_text(child) for child in node.children)


def _tidy(text: str) -> str:
    """``text`` without HIDDEN marks and the punctuation they leave stranded."""
    gap = rf"[\s,;，；、{HIDDEN}]*"
    text = re.sub(rf"[(（]{gap}{HIDDEN}{gap}[)）]", "", text)  # brackets left empty
    text = re.sub(rf"\s*{HIDDEN}\s*", " ", text)
    text = re.sub(r"\s+([,.;:!?，。；：])", r"\1", text)
    return " ".join(text.split())


def width(text: str) -> int:
    """The columns ``text`` takes: two for a wide (Chinese) character, else one."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9“\"(*])|(?<=[。！？])", text) if s]


def description(doctree: nodes.document) -> str:
    """The page's first paragraph of running text (not in a note, cell or framework block),
    as plain text: whole sentences up to about DESCRIPTION_WIDTH columns, stopping before
    a sentence with a formula, and starting at the first sentence that says what the page
    or chapter does ("This page …", "本页……") when the ones before it would crowd it out."""
    for paragraph in doctree.findall(nodes.paragraph):
        if not isinstance(paragraph.parent, nodes.section):
            continue
        sentences = _sentences(" ".join(_text(paragraph).split()))
        if not sentences or not _tidy(sentences[0]):
            continue
        own = next((i for i, s in enumerate(sentences) if OWN_OPENING.match(s.lstrip())), 0)
        if own and width(_tidy(" ".join(sentences[:own + 1]))) > DESCRIPTION_WIDTH:
            sentences = sentences[own:]
        kept = [sentences[0]]
        for sentence in sentences[1:]:
            joined = " ".join([*kept, sentence])
            if HIDDEN in sentence or width(_tidy(joined)) > DESCRIPTION_WIDTH:
                break
            kept.append(sentence)
        text = _tidy(" ".join(kept))
        text = re.sub(r"(?<=[\u3000-\u9fff\uff00-\uffef]) (?=[\u3000-\u9fff\uff00-\uffef])",
                      "", text)  # the joins between Chinese sentences
        if width(text) > DESCRIPTION_WIDTH * 3 // 2:
            text = _cut(text, DESCRIPTION_WIDTH)
        return text
    return ""


def _cut(text: str, columns: int) -> str:
    """``text`` cut to about ``columns`` columns, at a word where there are spaces, with "…"."""
    end = 0
    while end < len(text) and width(text[:end + 1]) <= columns:
        end += 1
    cut = text[:end]
    if end < len(text) and " " in cut and not text[end].isspace() and width(text[end]) == 1:
        cut = cut.rsplit(" ", 1)[0]
    # at the end of a clause where one ends in the last third ("…, fusion by…" reads badly)
    clause = max(cut.rfind(mark) for mark in (", ", "; ", "，", "；", "、"))
    if clause > len(cut) * 2 // 3:
        cut = cut[:clause]
    return cut.rstrip(",;:，；：、 ") + "…"


def report_url(repository: str, title: str, body: str) -> str:
    """A new issue in ``repository`` prefilled with ``title`` and ``body`` where the host
    takes them in the address (GitHub, GitLab); else the repository's address."""
    repository = repository.rstrip("/")
    host = urlparse(repository).hostname or ""
    if host == "github.com":
        return f"{repository}/issues/new?" + urlencode({"title": title, "body": body},
                                                       quote_via=quote)
    if host == "gitlab.com" or host.startswith("gitlab."):
        return f"{repository}/-/issues/new?" + urlencode(
            {"issue[title]": title, "issue[description]": body}, quote_via=quote)
    return repository


def page_title(pagename: str, context: dict, doctree) -> str:
    """The page's title as plain text (Sphinx's own pages: their name in the edition's
    language, as the theme shows it)."""
    if doctree is not None:
        for title in doctree.findall(nodes.title):
            return title.astext()
    title = html.unescape(re.sub(r"<[^>]+>", "", context.get("title") or "")).strip()
    return title or (_("Search") if pagename == "search" else pagename)


def _tag(element: str, **attributes: str) -> str:
    """An HTML tag; ``property_`` stands for the attribute ``property``."""
    attrs = " ".join(f'{name.rstrip("_")}="{html.escape(value, quote=True)}"'
                     for name, value in attributes.items())
    return f"<{element} {attrs}>\n"


def page_url(config, lang: str, pagename: str, up: str) -> str:
    """The address of ``pagename`` in edition ``lang``: absolute when the site's address is
    configured, else relative to the page (``up`` climbs to the edition's root)."""
    site = config.book_site_url
    if site:
        return f"{site.rstrip('/')}/{lang}/{pagename}.html"
    return f"{up}../{lang}/{pagename}.html"


def head_tags(app, pagename: str, context: dict, doctree) -> str:
    """Description, OpenGraph and hreflang tags of a page."""
    config = app.config
    lang, other = config.book_lang, config.book_other_lang
    up = "../" * pagename.count("/")
    title = page_title(pagename, context, doctree)
    text = description(doctree) if doctree is not None else ""
    tags = []
    if text:
        tags.append(_tag("meta", name="description", content=text))
    tags.append(_tag("meta", property_="og:title", content=title))
    if text:
        tags.append(_tag("meta", property_="og:description", content=text))
    tags.append(_tag("meta", property_="og:type",
                     content="website" if pagename == config.root_doc else "article"))
    tags.append(_tag("meta", property_="og:site_name", content=config.html_title or ""))
    tags.append(_tag("meta", property_="og:locale", content=OG_LOCALE[lang]))
    tags.append(_tag("meta", property_="og:locale:alternate", content=OG_LOCALE[other]))
    if context.get("pageurl"):
        tags.append(_tag("meta", property_="og:url", content=context["pageurl"]))
    for edition in (lang, other):
        tags.append(_tag("link", rel="alternate", hreflang=HREFLANG[edition],
                         href=page_url(config, edition, pagename, up)))
    tags.append(_tag("link", rel="alternate", hreflang="x-default",
                     href=page_url(config, DEFAULT_LANG, pagename, up)))
    return "".join(tags)


def report_link(app, pagename: str, context: dict, doctree) -> str:
    """The footer's "report a problem" paragraph of a page, in its language."""
    config = app.config
    repository = config.html_theme_options.get("repository_url", "")
    if not repository:
        return ""
    text = REPORT[config.book_lang]
    address = context.get("pageurl") or f"{config.book_lang}/{pagename}.html"
    title = page_title(pagename, context, doctree)
    url = report_url(repository, text["title"].format(title=title),
                     text["body"].format(url=address))
    return (f'<p class="book-report"><a href="{html.escape(url, quote=True)}" '
            f'target="_blank" rel="noopener">{html.escape(text["link"])}</a></p>\n')


VIEWPORT = re.compile(r'<meta name="viewport"[^>]*>\s*')


def page_context(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Add the head tags and the footer's report link to a page. Sphinx's layout has its
    viewport tag: the one docutils adds to the page's tags goes (templates/layout.html drops
    the theme's). The landing page, whose title is the book's, is not titled twice."""
    metatags = VIEWPORT.sub("", context.get("metatags", ""))
    context["metatags"] = metatags + head_tags(app, pagename, context, doctree)
    title = html.unescape(re.sub(r"<[^>]+>", "", context.get("title") or "")).strip()
    context["book_title_once"] = (pagename == app.config.root_doc
                                  and title == (context.get("docstitle") or "").strip())
    report = report_link(app, pagename, context, doctree)
    if report:
        context["theme_extra_footer"] = report + (context.get("theme_extra_footer") or "")


def setup(app) -> None:
    """Register the settings and the page hook (book_ext's setup calls this)."""
    app.add_config_value("book_site_url", "", "html")
    app.connect("html-page-context", page_context)
