"""What every benchmark shares: the sizes knob, the printed table and the JSON result.

A result is one JSON object: the benchmark's name, the machine it ran on
(:func:`d2l_ext.machine.describe`), the git commit, the arguments, and a table
(``columns``, their ``formats`` and ``rows``). It is written atomically: a failed run
leaves no file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from d2l_ext.machine import describe
from d2l_ext.utils import text_table

ROOT = Path(__file__).resolve().parents[1]


def smoke() -> bool:
    """Whether ``D2L_SMOKE`` asks for a quick, reduced run (as the notebooks' knob)."""
    return bool(os.environ.get("D2L_SMOKE"))


def commit() -> str:
    """The git commit of this checkout (with ``+`` if it has uncommitted changes), or ``""``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def table(columns: list[str], rows: list[list], formats: list[str]) -> str:
    """The rows as a right-aligned text table, each column with its format."""
    return text_table(columns, rows, formats)


def save(path: str | os.PathLike, benchmark: str, framework: str, args: dict,
         columns: list[str], rows: list[list], formats: list[str],
         extra: dict | None = None) -> dict:
    """Write the result to ``path`` (atomically) and return it; ``extra``: more keys (the
    measurements behind the table)."""
    result = {"benchmark": benchmark, "machine": describe(framework), "commit": commit(),
              "args": args, "columns": columns, "formats": formats, "rows": rows,
              **(extra or {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    try:
        part.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return result
