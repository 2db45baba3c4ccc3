"""Where a run happened: the record the kernel reports, and the note each page shows."""

from __future__ import annotations

#: Run in the kernel after a notebook: prints the machine and versions as JSON.
_PROBE = """
import json as _json
from d2l_ext.machine import describe as _describe
print(_json.dumps(_describe({framework!r})))
"""

_SIZES = {"en": {"full": "default sizes (the notebook sizes itself to the device)",
                 "smoke": "smoke size (a quick, reduced run)"},
          "zh": {"full": "默认规模（由笔记本按设备选定）",
                 "smoke": "冒烟测试规模（缩小的快速运行）"}}


def probe(framework: str) -> str:
    """The code that reports, as JSON, the machine and versions a notebook ran on."""
    return _PROBE.format(framework=framework)


def machine_name(run: dict, lang: str) -> str:
    """The machine of a run as a page in ``lang`` names it."""
    if run.get("gpus"):
        return run["machine"]
    return f"仅 CPU（{run['cpu']}）" if lang == "zh" else f"CPU only ({run['cpu']})"


def run_note(run: dict, lang: str) -> str:
    """The sentence under a page's title: which machine, versions and size made its outputs."""
    size = _SIZES[lang][run["size"]]
    if lang == "zh":
        return (f"> 本页输出来自一次真实运行：{machine_name(run, lang)}，{run['framework']}，"
                f"Python {run['python']}，{run['date']}，{size}。")
    return (f"> The outputs on this page come from a real run on {machine_name(run, lang)}, "
            f"{run['framework']}, Python {run['python']}, {run['date']}, {size}.")
