"""Paths and settings that every stage of the pipeline shares."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
TOOLS = ROOT / "tools"
STATIC = TOOLS / "book_static"
SPHINX_EXT = TOOLS / "sphinx_ext"

#: Each edition: its Sphinx language code and the other edition (for the language switch).
LANGUAGES = {"en": {"sphinx": "en", "other": "zh"}, "zh": {"sphinx": "zh_CN", "other": "en"}}
#: The language whose notebook a run executes; the others receive its outputs.
RUN_LANGUAGE = "en"
FRAMEWORKS = ("torch", "mxnet")
FRAMEWORK_NAMES = {"torch": "PyTorch", "mxnet": "MXNet"}


class BookError(RuntimeError):
    """A chapter source or notebook is not as the build expects."""


def book_config() -> dict:
    """``_config.yml``, the Jupyter Book configuration both editions share."""
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def repository() -> tuple[str, str]:
    """(``owner/name``, branch) from the one repository setting in ``_config.yml``."""
    repo = book_config()["repository"]
    url = repo["url"].rstrip("/")
    return url.split("github.com/", 1)[1], repo.get("branch", "main")


def site_url(lang: str | None = None) -> str:
    """The address of the published site (``html.baseurl`` in ``_config.yml``), ending in
    ``/``; with ``lang``, the address of that edition (``<site>/LANG/``)."""
    base = book_config().get("html", {}).get("baseurl")
    if not base:
        raise BookError("_config.yml sets no html.baseurl (the published site's address)")
    base = base.rstrip("/") + "/"
    return f"{base}{lang}/" if lang else base


def shown(path: Path) -> str:
    """A path as messages show it: relative to the repository where it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
