"""Cut a PyTorch profiler trace down to a few training steps, keeping its fields as they are.

    python tools/trim_trace.py IN.json.gz OUT.json.gz --steps 7 8

The book ships real GPU traces recorded by others (``d2l_ext/data/gpu_traces``); some are
large. This keeps every top-level field, every metadata event (process and thread names) and
every event that starts inside the span of the ``ProfilerStep#N`` annotations named by
``--steps`` (from the start of the first to the end of the last), device events included;
the events outside are left out. Nothing is rewritten, so what remains reads as the original
does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def trim(trace: dict, steps: list[int]) -> tuple[dict, str]:
    """``trace`` with only the events of ``steps``; and a line saying what was kept."""
    events = trace["traceEvents"]
    spans = {e["name"]: e for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"}
    wanted = [f"ProfilerStep#{s}" for s in steps]
    missing = [name for name in wanted if name not in spans]
    if missing:
        raise SystemExit(f"trim_trace: {', '.join(missing)} not in the trace; it has "
                         + ", ".join(sorted(spans, key=lambda n: int(n.split('#')[1]))))
    start = min(spans[n]["ts"] for n in wanted)
    end = max(spans[n]["ts"] + spans[n]["dur"] for n in wanted)
    kept = [e for e in events
            if e.get("ph") == "M" or "ts" not in e or start <= float(e["ts"]) <= end]
    note = (f"kept {len(kept)} of {len(events)} events: the metadata and those starting "
            f"within {', '.join(wanted)} ({(end - start) / 1000:.1f} ms)")
    return dict(trace, traceEvents=kept), note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--steps", type=int, nargs="+", required=True)
    args = parser.parse_args(argv)
    with gzip.open(args.source, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    trimmed, note = trim(trace, args.steps)
    part = args.target.with_name(args.target.name + ".part")
    with gzip.open(part, "wt", encoding="utf-8") as f:
        json.dump(trimmed, f, separators=(",", ":"))
    part.replace(args.target)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
