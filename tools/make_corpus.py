"""Write the text corpus of the chapter on transformers: this book's own English prose.

    python tools/make_corpus.py

The corpus is the prose of the chapters named in CHAPTERS (the PyTorch tab's text, without
code cells, labels, directives or values from the run), one paragraph per line, in
``d2l_ext/data/corpus/book-en.txt``; PROVENANCE.md beside it names the commit it came from
and its licence (CC BY-SA 4.0, as the book's text). The file is written whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import config  # noqa: E402
from pipeline.sources import PLACEHOLDER, parse, plain_text, prose_for  # noqa: E402

CHAPTERS = ("async-computation", "gpu-basics", "multi-gpu-concise", "tuning-tips",
            "host-device-sync", "communication", "memory")
OUT = config.ROOT / "d2l_ext" / "data" / "corpus"


def paragraphs(name: str) -> list[str]:
    """The plain-text paragraphs of one English chapter source, PyTorch tab."""
    chapter = parse(config.ROOT / "chapters" / "en" / f"{name}.md")
    found = []
    for cell in chapter.cells:
        if cell.kind != "markdown":
            continue
        text = re.sub(r"^:{5}\{admonition\} Quick answers.*?^:{5}$", "", cell.source,
                      flags=re.S | re.M)  # the box of figures from the run
        text = prose_for(text, "torch")
        text = re.sub(r"^:{3,}.*$|^\(.*\)=$|^:[\w-]+:.*$", "", text, flags=re.M)
        for block in re.split(r"\n\s*\n", text):
            if (not block.strip() or block.lstrip().startswith(("#", "|", "```"))
                    or PLACEHOLDER.search(block)):  # a sentence with its values cut is no text
                continue
            plain = plain_text(block)
            if len(plain) > 40:
                found.append(plain)
    return found


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    text = "\n".join(p for name in CHAPTERS for p in paragraphs(name)) + "\n"
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=config.ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    write_atomically(OUT / "book-en.txt", text)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    write_atomically(OUT / "PROVENANCE.md", f"""# Provenance of `book-en.txt`

The English prose of this book's chapters {", ".join(CHAPTERS)}
(the PyTorch tab's text, without code cells, labels, directives, and without the paragraphs
that cite values from the run; one paragraph per line), written by `tools/make_corpus.py`
from the chapter sources at commit {commit}. {len(text.encode()):,} bytes, sha256 {digest}….

Licence: Creative Commons Attribution-ShareAlike 4.0 International (CC BY-SA 4.0), as the
book's text (`LICENSE-TEXT.md`): "Computational Performance, hands-on", by its authors.
The chapter on transformers trains its small GPT on these bytes.
""")
    print(f"wrote {OUT / 'book-en.txt'}: {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
