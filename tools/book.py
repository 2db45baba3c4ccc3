"""Build the book: chapter sources -> per-framework notebooks -> two-language website.

    python tools/book.py execute [--smoke] [CHAPTER ...]   split, run and commit notebooks
    python tools/book.py build                              merge and build the site
    python tools/book.py check                              are the notebooks up to date?

A chapter source (``chapters/LANG/NAME.md``) is a MyST markdown notebook. Code cells
tagged ``torch`` or ``mxnet`` belong to one framework, untagged ones to both; prose
for one framework sits in a ``:::{framework} torch`` ... ``:::`` block. Prose inside
such a block may cite values from the run as ``{{expression}}`` or ``{{expression:.3f}}``,
evaluated in the kernel at the end of the run.

``execute`` writes ``notebooks/LANG/FRAMEWORK/NAME.ipynb`` (what Colab and SageMaker
Studio Lab open, and what nbval checks), executed in a fresh kernel each. ``build``
merges the two executed notebooks of a page back into one, where framework cells
and blocks become synced tabs, and builds each language with Jupyter Book.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
STATIC = Path(__file__).resolve().parent / "book_static"
LANGUAGES = {"en": {"sphinx": "en", "other": "zh"}, "zh": {"sphinx": "zh_CN", "other": "en"}}
FRAMEWORKS = ("torch", "mxnet")
FRAMEWORK_NAMES = {"torch": "PyTorch", "mxnet": "MXNet"}

CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
FRAMEWORK_BLOCK = re.compile(r"^:::\{framework\} (\w+)[ \t]*\n(.*?)^:::[ \t]*$", re.S | re.M)
PLACEHOLDER = re.compile(r"\{\{\s*([^:{}]+?)\s*(?::([^{}]*))?\}\}")


class BookError(RuntimeError):
    """A chapter source or notebook is not as the build expects."""


# ---------------------------------------------------------------- sources
@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    source: str
    tags: list[str] = field(default_factory=list)

    @property
    def framework(self) -> str | None:
        found = [t for t in self.tags if t in FRAMEWORKS]
        return found[0] if found else None


@dataclass
class Chapter:
    lang: str
    name: str
    cells: list[Cell]

    @property
    def path(self) -> Path:
        return CHAPTERS / self.lang / f"{self.name}.md"


def _code_cell(body: str) -> Cell:
    tags: list[str] = []
    lines = body.split("\n")
    if lines and lines[0].strip() == "---":  # YAML options block
        end = lines.index("---", 1)
        options = yaml.safe_load("\n".join(lines[1:end])) or {}
        tags = list(options.get("tags", []))
        lines = lines[end + 1:]
    while lines and lines[0].startswith(":") and ":" in lines[0][1:]:
        key, value = lines.pop(0)[1:].split(":", 1)
        if key.strip() == "tags":
            tags = list(yaml.safe_load(value))
    unknown = [t for t in tags if t in {"pytorch", "mx"}]
    if unknown:
        raise BookError(f"use the tags 'torch' and 'mxnet', not {unknown}")
    return Cell("code", "\n".join(lines).rstrip("\n"), tags)


def parse(path: Path) -> Chapter:
    """Read a chapter source into cells (front matter dropped)."""
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text[text.index("\n---\n", 4) + 5:]
    cells, pos = [], 0
    for match in CODE_CELL.finditer(text):
        prose = text[pos:match.start()].strip("\n")
        if prose.strip():
            cells.append(Cell("markdown", prose))
        cells.append(_code_cell(match.group(1)))
        pos = match.end()
    if text[pos:].strip():
        cells.append(Cell("markdown", text[pos:].strip("\n")))
    for block in FRAMEWORK_BLOCK.finditer(text):
        if block.group(1) not in FRAMEWORKS:
            raise BookError(f"{path}: unknown framework {block.group(1)!r} in a framework block")
    return Chapter(path.parent.name, path.stem, cells)


def chapters(lang: str | None = None) -> list[Chapter]:
    """All chapter sources (index pages excluded), sorted."""
    langs = [lang] if lang else list(LANGUAGES)
    return [parse(p) for code in langs for p in sorted((CHAPTERS / code).glob("*.md"))
            if p.stem != "index"]


def _prose_for(markdown: str, framework: str) -> str:
    """Keep this framework's blocks (without their fences), drop the other's."""
    def keep(match: re.Match) -> str:
        return match.group(2).rstrip("\n") if match.group(1) == framework else ""
    return re.sub(r"\n{3,}", "\n\n", FRAMEWORK_BLOCK.sub(keep, markdown)).strip("\n")


def _book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def repository() -> tuple[str, str]:
    """(``owner/name``, branch) from the one repository setting in ``_config.yml``."""
    repo = _book_config()["repository"]
    url = repo["url"].rstrip("/")
    return url.split("github.com/", 1)[1], repo.get("branch", "main")


def install_cell(framework: str) -> nbformat.NotebookNode:
    """The first cell: installs d2l_ext where it is missing (Colab, Studio Lab)."""
    slug, branch = repository()
    extra = "torch" if framework == "torch" else "mxnet"
    lines = ["# Installs what Colab / SageMaker Studio Lab lack; nothing where d2l_ext is there."]
    if framework == "mxnet":
        lines.append("# MXNet 1.9.1 needs Python 3.11 and numpy < 1.24 (numpy 1.23.5).")
    lines += ["import importlib.util",
              "if importlib.util.find_spec('d2l_ext') is None:",
              f"    !pip install -q \"d2l-ext[{extra}] @ git+https://github.com/{slug}@{branch}\""]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.metadata["d2l_ext"] = {"role": "install"}
    return cell


def split(chapter: Chapter, framework: str) -> nbformat.NotebookNode:
    """The unexecuted notebook of one framework."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    title_done = False
    for index, cell in enumerate(chapter.cells):
        if cell.framework not in (None, framework):
            continue
        if cell.kind == "markdown":
            text = _prose_for(cell.source, framework)
            if text:
                new = nbformat.v4.new_markdown_cell(text)
                new.metadata["d2l_ext"] = {"source_index": index}
                nb.cells.append(new)
            if not title_done and re.search(r"^# ", cell.source, re.M):
                nb.cells.append(install_cell(framework))
                title_done = True
        else:
            new = nbformat.v4.new_code_cell(cell.source)
            new.metadata["d2l_ext"] = {"source_index": index}
            if cell.tags:
                new.metadata["tags"] = [t for t in cell.tags if t not in FRAMEWORKS]
            nb.cells.append(new)
    if not title_done:
        raise BookError(f"{chapter.path}: the chapter needs a '# Title' line")
    nb.metadata["d2l_ext"] = {"source": f"chapters/{chapter.lang}/{chapter.name}.md",
                              "framework": framework, "code_hash": code_hash(nb)}
    return nb


def code_hash(nb: nbformat.NotebookNode) -> str:
    """A hash of everything in a split notebook that affects its execution or text."""
    parts = [f"{c.cell_type}\n{c.source}" for c in nb.cells]
    return hashlib.sha256("\n\x00".join(parts).encode()).hexdigest()[:16]


def notebook_path(chapter: Chapter, framework: str) -> Path:
    return NOTEBOOKS / chapter.lang / framework / f"{chapter.name}.ipynb"


# ---------------------------------------------------------------- execution
# Code run in the kernel after a notebook: where it ran, as JSON. The framework part
# sets _n (number of GPUs), _gpu (their name) and _framework.
_PROBE_FRAMEWORK = {
    "torch": """
import torch as _torch
_n = _torch.cuda.device_count()
_gpu = _torch.cuda.get_device_name(0) if _n else ''
_framework = 'PyTorch ' + _torch.__version__
""",
    "mxnet": """
import subprocess as _sp, mxnet as _mx
_n = _mx.context.num_gpus()
_gpu = (_sp.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
                capture_output=True, text=True).stdout.splitlines()[0] if _n else '')
_framework = 'MXNet ' + _mx.__version__
""",
}
_PROBE_COMMON = """
import json as _json, platform as _platform, datetime as _dt
def _cpu_name():
    try:
        for _line in open('/proc/cpuinfo'):
            if _line.startswith('model name'):
                return _line.split(':', 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or 'CPU'
_machine = f"{_n} x {_gpu}" if _n else f"CPU only ({_cpu_name()})"
print(_json.dumps({"machine": _machine, "framework": _framework,
                   "python": _platform.python_version(),
                   "date": _dt.date.today().isoformat()}))
"""


def probe(framework: str) -> str:
    """The code that reports, as JSON, the machine and versions a notebook ran on."""
    return _PROBE_FRAMEWORK[framework] + _PROBE_COMMON


def _placeholders(nb: nbformat.NotebookNode) -> dict[str, tuple[str, str]]:
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for m in PLACEHOLDER.finditer(cell.source):
                found[m.group(0)] = (m.group(1), m.group(2) or "")
    return found


def _fill(text: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values[m.group(0)], text)


def execute(chapter: Chapter, framework: str, smoke: bool, timeout: int = 1800) -> Path:
    """Run one framework's notebook in a fresh kernel and write it with its outputs."""
    from nbclient import NotebookClient

    nb = split(chapter, framework)
    wanted = _placeholders(nb)
    collect = ("import json as _json\nprint(_json.dumps({"
               + ", ".join(f"{key!r}: format({name}, {fmt!r})"
                           for key, (name, fmt) in wanted.items()) + "}))")
    nb.cells.append(nbformat.v4.new_code_cell(collect))
    nb.cells.append(nbformat.v4.new_code_cell(probe(framework)))
    saved = {k: os.environ.get(k) for k in ("D2L_SMOKE", "PYTHONWARNINGS")}
    os.environ.update(D2L_SMOKE="1" if smoke else "", PYTHONWARNINGS="ignore")  # kernel inherits
    try:
        with tempfile.TemporaryDirectory() as cwd:  # files the notebook writes stay out of git
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": cwd}})
            client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    probe_cell, values_cell = nb.cells.pop(), nb.cells.pop()
    run = json.loads(probe_cell.outputs[-1]["text"])
    values = json.loads(values_cell.outputs[-1]["text"])
    run["size"] = "smoke" if smoke else "full"
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _fill(cell.source, values)
    nb.metadata["d2l_ext"].update(run=run, values=values)
    note = nbformat.v4.new_markdown_cell(run_note(run, chapter.lang))
    note.metadata["d2l_ext"] = {"role": "run-note"}
    nb.cells.insert(_title_index(nb) + 1, note)
    out = notebook_path(chapter, framework)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".ipynb.part")
    nbformat.write(nb, tmp)
    os.replace(tmp, out)  # never leave a half-written notebook
    return out


def _title_index(nb: nbformat.NotebookNode) -> int:
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "markdown" and re.search(r"^# ", c.source, re.M))


def machine_name(run: dict, lang: str) -> str:
    """The machine of a run as the page names it (the probe writes English)."""
    machine = run["machine"]
    if lang == "zh" and machine.startswith("CPU only (") and machine.endswith(")"):
        return f"仅 CPU（{machine[len('CPU only ('):-1]}）"
    return machine


def run_note(run: dict, lang: str) -> str:
    sizes = {"en": {"full": "default sizes (the notebook sizes itself to the device)",
                    "smoke": "smoke size (a quick, reduced run)"},
             "zh": {"full": "默认规模（由笔记本按设备选定）",
                    "smoke": "冒烟测试规模（缩小的快速运行）"}}
    size = sizes[lang][run["size"]]
    if lang == "zh":
        return (f"> 本页输出来自一次真实运行：{machine_name(run, lang)}，{run['framework']}，"
                f"Python {run['python']}，{run['date']}，{size}。")
    return (f"> The outputs on this page come from a real run on {machine_name(run, lang)}, "
            f"{run['framework']}, Python {run['python']}, {run['date']}, {size}.")


def stale() -> list[str]:
    """Notebooks that are missing or were executed from an older chapter source."""
    problems = []
    for chapter in chapters():
        for framework in FRAMEWORKS:
            path = notebook_path(chapter, framework)
            want = split(chapter, framework).metadata["d2l_ext"]["code_hash"]
            if not path.exists():
                problems.append(f"{path.relative_to(ROOT)} is missing")
            elif nbformat.read(path, 4).metadata.get("d2l_ext", {}).get("code_hash") != want:
                problems.append(f"{path.relative_to(ROOT)} is older than "
                                f"chapters/{chapter.lang}/{chapter.name}.md")
    return problems


# ---------------------------------------------------------------- merging
def _container(framework: str, text: str) -> str:
    return f"::::{{container}} fw fw-{framework}\n{text}\n::::"


def merge(chapter: Chapter) -> nbformat.NotebookNode:
    """One page notebook: framework cells tagged, framework prose in containers."""
    runs = {fw: nbformat.read(notebook_path(chapter, fw), 4) for fw in FRAMEWORKS}
    by_index = {fw: {c.metadata["d2l_ext"]["source_index"]: c for c in nb.cells
                     if "source_index" in c.metadata.get("d2l_ext", {})}
                for fw, nb in runs.items()}
    values = {fw: nb.metadata["d2l_ext"]["values"] for fw, nb in runs.items()}
    page = nbformat.v4.new_notebook()
    page.metadata["kernelspec"] = runs["torch"].metadata["kernelspec"]
    # pygments_lexer "ipython3" highlights `!cmd` and `%magic` lines without warnings
    page.metadata["language_info"] = runs["torch"].metadata.get("language_info", {})
    title_done = False
    for index, cell in enumerate(chapter.cells):
        if cell.kind == "markdown":
            def block(match: re.Match) -> str:
                fw = match.group(1)
                return _container(fw, _fill(match.group(2).rstrip("\n"), values[fw]))
            text = FRAMEWORK_BLOCK.sub(block, cell.source)
            if PLACEHOLDER.search(text):
                raise BookError(f"{chapter.path}: a {{{{value}}}} outside a framework block: "
                                "values differ per framework, so cite them inside one")
            page.cells.append(nbformat.v4.new_markdown_cell(text))
            if not title_done and re.search(r"^# ", cell.source, re.M):
                notes = "\n\n".join(
                    _container(fw, run_note(runs[fw].metadata["d2l_ext"]["run"], chapter.lang))
                    for fw in FRAMEWORKS)
                page.cells.append(nbformat.v4.new_markdown_cell(notes))
                title_done = True
            continue
        if cell.framework is None and _same_outputs(*(by_index[fw][index] for fw in FRAMEWORKS)):
            shared = copy.deepcopy(by_index[FRAMEWORKS[0]][index])
            shared.metadata.pop("d2l_ext", None)
            page.cells.append(shared)  # one cell, no tabs
            continue
        for fw in FRAMEWORKS:
            if cell.framework in (None, fw):
                executed = copy.deepcopy(by_index[fw][index])
                executed.metadata["tags"] = [fw] + executed.metadata.get("tags", [])
                executed.metadata.pop("d2l_ext", None)
                page.cells.append(executed)
    return page


def _same_outputs(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    def strip(cell):
        return [{k: v for k, v in o.items() if k != "execution_count"} for o in cell.outputs]
    return strip(a) == strip(b)


def _write_edition(lang: str) -> Path:
    src = BUILD / "src" / lang
    if src.exists():
        shutil.rmtree(src)
    (src / "chapters").mkdir(parents=True)
    config = _book_config()
    config["title"] = config["title_by_language"][lang] if "title_by_language" in config \
        else config["title"]
    config.pop("title_by_language", None)
    sphinx = config.setdefault("sphinx", {})
    sphinx.setdefault("config", {})["language"] = LANGUAGES[lang]["sphinx"]
    sphinx["config"]["book_lang"] = lang
    sphinx["config"]["book_other_lang"] = LANGUAGES[lang]["other"]
    sphinx["config"]["book_root"] = str(ROOT)
    sphinx["config"]["html_static_path"] = [str(STATIC)]
    sphinx.setdefault("local_extensions", {})["book_ext"] = str(STATIC.parent / "sphinx_ext")
    (src / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    shutil.copy(ROOT / "_toc.yml", src / "_toc.yml")
    shutil.copy(CHAPTERS / lang / "index.md", src / "index.md")
    shutil.copy(STATIC / "favicon.svg", src / "favicon.svg")
    if (CHAPTERS / lang / "img").exists():
        shutil.copytree(CHAPTERS / lang / "img", src / "chapters" / "img")
    for chapter in chapters(lang):
        nbformat.write(merge(chapter), src / "chapters" / f"{chapter.name}.ipynb")
    return src


MATHJAX_BUNDLE = "tex-chtml.js"  # the one bundle sphinx-mathjax-offline's pages load


def _prune_mathjax(static: Path) -> None:
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
    site = BUILD / "site"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    for lang in LANGUAGES:
        src = _write_edition(lang)
        out = BUILD / "jb" / lang
        cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src), "--all",
               "-n", "-W", "--keep-going", "--path-output", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-6000:] + done.stderr[-6000:])
            raise BookError(f"the {lang} edition did not build cleanly (see above)")
        shutil.copytree(out / "_build" / "html", site / lang)
        _prune_mathjax(site / lang / "_static")
        for chapter in chapters(lang):
            for fw in FRAMEWORKS:
                dest = site / lang / "notebooks" / fw / f"{chapter.name}.ipynb"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(notebook_path(chapter, fw), dest)
    shutil.copy(STATIC / "root.html", site / "index.html")
    shutil.copy(STATIC / "book.css", site / "book.css")
    shutil.copy(STATIC / "favicon.svg", site / "favicon.svg")
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="split and execute the notebooks")
    ex.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    ex.add_argument("--smoke", action="store_true", help="quick reduced run (as CI)")
    ex.add_argument("--lang", choices=list(LANGUAGES))
    ex.add_argument("--framework", choices=FRAMEWORKS)
    sub.add_parser("build", help="build the website into _build/site")
    sub.add_parser("check", help="fail if an executed notebook is missing or stale")
    args = parser.parse_args(argv)
    try:
        if args.command == "execute":
            for chapter in chapters(args.lang):
                if args.chapters and chapter.name not in args.chapters:
                    continue
                for fw in [args.framework] if args.framework else FRAMEWORKS:
                    start = datetime.datetime.now()
                    path = execute(chapter, fw, args.smoke)
                    seconds = (datetime.datetime.now() - start).total_seconds()
                    print(f"executed {path.relative_to(ROOT)} in {seconds:.0f} s", flush=True)
        elif args.command == "build":
            print(f"built {build().relative_to(ROOT)}/index.html")
        else:
            problems = stale()
            print("\n".join(problems) or "all executed notebooks are up to date")
            return 1 if problems else 0
    except BookError as err:
        print(f"book.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
