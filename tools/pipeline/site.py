"""Stage 5: the pages of each language -> two Jupyter Book editions -> ``_build/site``.

Each edition is written as a small Jupyter Book project under ``_build/src/LANG`` (the
shared ``_config.yml`` and ``_toc.yml``, the language's index page, figures and merged
pages), built strictly, and copied to ``_build/site/LANG`` next to the committed
notebooks its pages link to. The site's root page lets the reader pick an edition.
Chinese search needs a word segmenter: Sphinx uses ``jieba`` when it is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

from pipeline import config
from pipeline.config import FRAMEWORKS, LANGUAGES, BookError, book_config
from pipeline.notebooks import notebook_path, stale
from pipeline.pages import merge
from pipeline.plain import FIGURE_NUMBER, targets
from pipeline.sources import chapters

MATHJAX_BUNDLE = "tex-chtml.js"  # the one bundle sphinx-mathjax-offline's pages load
#: The edition whose section ids the other takes (built first); where it records them.
REFERENCE_LANGUAGE = "en"
SECTION_IDS = config.BUILD / "jb" / "section-ids.json"


def write_edition(lang: str) -> Path:
    """The Jupyter Book project of one edition, under ``_build/src/LANG``."""
    src = config.BUILD / "src" / lang
    if src.exists():
        shutil.rmtree(src)
    (src / "chapters").mkdir(parents=True)
    cfg = book_config()
    cfg["title"] = cfg.pop("title_by_language", {}).get(lang, cfg["title"])
    cfg["author"] = cfg.pop("author_by_language", {}).get(lang, cfg.get("author"))
    html = cfg.setdefault("html", {})
    footer = html.pop("extra_footer_by_language", {}).get(lang)
    if footer:
        repo = cfg["repository"]
        html["extra_footer"] = footer.format(
            licences=f"{repo['url']}/blob/{repo.get('branch', 'main')}/LICENSE-TEXT.md")
    sphinx = cfg.setdefault("sphinx", {})
    sphinx.setdefault("config", {})["language"] = LANGUAGES[lang]["sphinx"]
    sphinx["config"]["book_lang"] = lang
    # "Figure 3.2" / "图 3.2", as the notebooks' captions say it (plain.FIGURE_NUMBER)
    sphinx["config"]["numfig"] = True
    sphinx["config"]["numfig_format"] = {"figure": FIGURE_NUMBER[lang].format("%s")}
    sphinx["config"]["book_other_lang"] = LANGUAGES[lang]["other"]
    sphinx["config"]["book_root"] = str(config.ROOT)
    site_url = html.pop("baseurl", "")
    sphinx["config"]["book_site_url"] = site_url
    if site_url:  # each edition's pages live under LANG/
        html["baseurl"] = f"{site_url.rstrip('/')}/{lang}/"
    ids = str(SECTION_IDS)  # the reference edition writes its section ids, the other reads
    sphinx["config"]["book_section_ids_write" if lang == REFERENCE_LANGUAGE
                     else "book_section_ids_read"] = ids
    sphinx["config"]["html_static_path"] = [str(config.STATIC)]
    sphinx["config"]["book_anchor_pages"] = anchor_pages(lang)
    sphinx.setdefault("local_extensions", {})["book_ext"] = str(config.SPHINX_EXT)
    (src / "_config.yml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    shutil.copy(config.ROOT / "_toc.yml", src / "_toc.yml")
    shutil.copy(config.CHAPTERS / lang / "index.md", src / "index.md")
    shutil.copy(config.STATIC / "favicon.svg", src / "favicon.svg")
    if (config.CHAPTERS / lang / "img").exists():
        shutil.copytree(config.CHAPTERS / lang / "img", src / "chapters" / "img")
    for chapter in chapters(lang):
        nbformat.write(merge(chapter), src / "chapters" / f"{chapter.name}.ipynb")
    return src


def anchor_pages(lang: str) -> dict[str, str]:
    """Each label of the edition (``(label)=`` and figure names, the ids its pages give
    them) -> the page that has it (``chapters/NAME``): a link to a section that moved to
    another page when its chapter was split into section pages lands there (``book.js``)."""
    return {label: f"chapters/{target.page}" for label, target in sorted(targets(lang).items())}


def prune_mathjax(static: Path) -> None:
    """Drop the MathJax bundles no page loads (the offline copy ships every variant).

    Extensions, fonts, the menu's renderers and the speech rules stay: MathJax loads them
    on demand.
    """
    mathjax = static / "mathjax"
    if not (mathjax / MATHJAX_BUNDLE).is_file():
        raise BookError(f"{mathjax / MATHJAX_BUNDLE} is missing: is sphinx-mathjax-offline "
                        "installed (requirements.txt) and still shipping that bundle?")
    for bundle in [*mathjax.glob("tex-*.js"), *mathjax.glob("mml-*.js"), mathjax / "node-main.js"]:
        if bundle.name != MATHJAX_BUNDLE:
            bundle.unlink(missing_ok=True)


def build() -> Path:
    """Build both editions strictly into ``_build/site``; returns the site directory."""
    problems = stale()
    if problems:
        raise BookError("run `python tools/book.py execute` first:\n  " + "\n  ".join(problems))
    site = config.BUILD / "site"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    SECTION_IDS.unlink(missing_ok=True)
    for lang in sorted(LANGUAGES, key=lambda lang: lang != REFERENCE_LANGUAGE):
        src = write_edition(lang)
        out = config.BUILD / "jb" / lang
        shutil.rmtree(out, ignore_errors=True)  # no page of an earlier build survives
        cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src), "--all",
               "-n", "-W", "--keep-going", "--path-output", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-6000:] + done.stderr[-6000:])
            mismatch = re.search(r"HeadingMismatch: (.*)", done.stdout + done.stderr)
            raise BookError(f"the {lang} edition did not build cleanly"
                            + (f": {mismatch.group(1)}" if mismatch else " (see above)"))
        shutil.copytree(out / "_build" / "html", site / lang)
        prune_mathjax(site / lang / "_static")
        for chapter in chapters(lang):
            for fw in FRAMEWORKS:
                dest = site / lang / "notebooks" / fw / f"{chapter.name}.ipynb"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(notebook_path(chapter, fw), dest)
    for name in ("root.html", "book.css", "favicon.svg"):
        shutil.copy(config.STATIC / name, site / ("index.html" if name == "root.html" else name))
    return site
