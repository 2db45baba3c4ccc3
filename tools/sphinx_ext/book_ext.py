"""Sphinx extension of the book: framework tabs, language switch and notebook links.

It tells each page, in ``<meta name="book-...">`` tags, where the same page is in
the other language and where its notebooks are; ``book.js`` builds the interface.
"""

from __future__ import annotations

from pathlib import Path

FRAMEWORKS = ("torch", "mxnet")


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
    app.add_config_value("book_lang", "en", "html")
    app.add_config_value("book_other_lang", "zh", "html")
    app.add_config_value("book_root", ".", "html")
    app.add_js_file("book.js")
    app.add_css_file("book.css")
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
