"""Build the book: chapter sources -> notebooks -> executed notebooks -> pages -> site.

    python tools/book.py execute [--smoke] [--framework F] [--page] [CHAPTER ...]
    python tools/book.py build        merge the executed notebooks and build both editions
    python tools/book.py check        are the executed notebooks up to date?
    python tools/book.py refill [--framework F] [--page] [CHAPTER ...]
                                      after a change of prose only: re-render the notebooks
                                      (prose as plain Jupyter markdown, run-time cell,
                                      metadata) from the sources, keeping the outputs of
                                      their run; no names: every chapter
    python tools/book.py validate [--budget SECONDS] [--nbval] [--benchmarks] [CHAPTER ...]
                                      on a GPU: execute the PyTorch notebooks whose GPU outputs
                                      are missing or oldest first, as many as fit the budget

``execute`` runs each chapter once per framework, in a fresh kernel, and writes the
outputs into the notebooks of both languages (``notebooks/LANG/FRAMEWORK/NAME.ipynb``):
what Colab and SageMaker Studio Lab open and what nbval checks. The stages live in
``tools/pipeline/``, one module each.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline.config import FRAMEWORKS, BookError, shown  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="run the notebooks (one run per framework fills "
                                        "both languages)")
    ex.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    ex.add_argument("--smoke", action="store_true", help="quick reduced run (as CI)")
    ex.add_argument("--framework", choices=FRAMEWORKS)
    ex.add_argument("--page", action="store_true", help="only the pages named: a chapter's "
                    "name is its main page, without its section pages")
    sub.add_parser("build", help="build the website into _build/site")
    sub.add_parser("check", help="fail if an executed notebook is missing or stale")
    re_ = sub.add_parser("refill", help="after a change of prose only: re-render the executed "
                                        "notebooks from the sources, keeping their outputs")
    re_.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    re_.add_argument("--framework", choices=FRAMEWORKS)
    re_.add_argument("--page", action="store_true", help="only the pages named (as execute)")
    se = sub.add_parser("seams", help="where a long chapter could be split into section "
                                      "pages: words per section, state each seam would cut")
    se.add_argument("chapter", help="a chapter name")
    se.add_argument("--framework", choices=FRAMEWORKS)
    va = sub.add_parser("validate", help="GPU validation (tools/gpu_validate.sh calls this)")
    va.add_argument("chapters", nargs="*", help="chapter names (default: every chapter, "
                    "those whose GPU outputs are missing or oldest first)")
    va.add_argument("--budget", metavar="SECONDS", help="time budget in seconds (540) or "
                    "minutes (9m): no chapter, nbval or benchmark starts that would not "
                    "finish within it (default: no limit)")
    va.add_argument("--started", type=float, metavar="EPOCH", help="when the budget began, "
                    "in seconds since the epoch (gpu_validate.sh passes its start, so that "
                    "the setup counts; default: now)")
    va.add_argument("--nbval", action="store_true", help="also run nbval over the notebooks "
                    "executed (at smoke size)")
    va.add_argument("--benchmarks", action="store_true", help="also run benchmarks/*.py")
    va.add_argument("--smoke", action="store_true", help="reduced sizes (a quick dry run)")
    va.add_argument("--allow-cpu", action="store_true", help="run without a GPU (dry run)")
    args = parser.parse_args(argv)
    try:
        from pipeline.execute import Interrupted, recover

        for path in recover():  # a set of notebooks whose replacement was killed half-way
            print(f"book.py: restored {shown(path)} (an earlier run was killed while "
                  "writing it)", file=sys.stderr)
        if args.command == "execute":
            from pipeline.execute import execute_all

            execute_all(args.chapters, [args.framework] if args.framework else list(FRAMEWORKS),
                        args.smoke, log=lambda line: print(line, flush=True),
                        pages_only=args.page)
        elif args.command == "refill":
            from pipeline.execute import refill_all

            refill_all(args.chapters, [args.framework] if args.framework else list(FRAMEWORKS),
                       pages_only=args.page)
        elif args.command == "build":
            from pipeline.site import build

            print(f"built {shown(build())}/index.html")
        elif args.command == "seams":
            from pipeline.seams import report
            from pipeline.sources import chapter_names

            if args.chapter not in chapter_names():
                parser.error(f"no chapter named {args.chapter!r}; the chapters are: "
                             + ", ".join(chapter_names()))
            print(report(args.chapter, [args.framework] if args.framework else None))
        elif args.command == "check":
            from pipeline.notebooks import stale

            problems = stale()
            print("\n".join(problems) or "all executed notebooks are up to date")
            return 1 if problems else 0
        else:
            from pipeline.validate import parse_budget, validate

            try:
                budget = parse_budget(args.budget) if args.budget is not None else None
            except ValueError as err:
                parser.error(str(err))
            return validate(args.chapters, smoke=args.smoke, allow_cpu=args.allow_cpu,
                            nbval=args.nbval, benchmarks=args.benchmarks, budget=budget,
                            started=args.started, log=lambda line: print(line, flush=True))
    except Interrupted as err:
        print(f"book.py: {err}", file=sys.stderr)
        return 130
    except BookError as err:
        print(f"book.py: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("book.py: interrupted", file=sys.stderr)
        return 130
    return 0


def cli(argv: list[str] | None = None) -> None:
    """Run :func:`main` and exit with its status. After a stop (130) leave at once: the
    stopped kernel's client may still hold sockets that Python's shutdown would trip on."""
    try:
        status = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the output went to a reader that stopped early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        sys.exit(1)
    if status == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    cli()
