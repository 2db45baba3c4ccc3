"""Draw the book's diagrams as SVG, one set per language: python tools/figures.py

The figures are simple boxes and arrows, written as SVG by hand so that their text stays
text (searchable, translatable) and needs no plotting library or fonts at build time.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEXT = {
    "en": {
        "frontend": "Frontend", "backend": "Backend", "queue": "operation queue",
        "threads": "worker threads", "gpu": "GPU streams", "others": "C++, Scala, R, …",
        "deps": "dependency engine", "issue": "issue", "execute": "execute",
        "time": "time", "wait": "print(z): waits", "const": "2",
        "call": "torch.mm(a, b)", "cpu_tensor": "CPU tensors", "cuda_tensor": "CUDA tensors",
        "inline": "operator runs inline", "returns_done": "returns when the result exists",
        "launch": "launch kernel", "returns_now": "returns at once",
        "stream": "CUDA stream, in issue order", "device": "GPU",
        "minibatch": "minibatch", "shard": "shard", "fwd_bwd": "forward + backward",
        "allreduce": "all-reduce: average the gradients", "update": "same update",
        "compute": "compute", "comm": "communication", "fwd": "forward",
        "bwd": "backward", "bucket": "bucket", "ar": "all-reduce", "opt": "step",
        "overlap": "DDP: each bucket is all-reduced while backward goes on", "colon": ": ",
    },
    "zh": {
        "frontend": "前端", "backend": "后端", "queue": "操作队列",
        "threads": "工作线程", "gpu": "GPU 流", "others": "C++、Scala、R……",
        "deps": "依赖引擎", "issue": "发出", "execute": "执行",
        "time": "时间", "wait": "print(z)：等待", "const": "2",
        "call": "torch.mm(a, b)", "cpu_tensor": "CPU 张量", "cuda_tensor": "CUDA 张量",
        "inline": "算子在调用线程中执行", "returns_done": "结果算好才返回",
        "launch": "发射核函数", "returns_now": "立即返回",
        "stream": "CUDA 流：按发射顺序执行", "device": "GPU",
        "minibatch": "小批量", "shard": "分片", "fwd_bwd": "前向 + 反向",
        "allreduce": "全归约：对梯度求平均", "update": "相同的更新",
        "compute": "计算", "comm": "通信", "fwd": "前向",
        "bwd": "反向", "bucket": "桶", "ar": "全归约", "opt": "更新",
        "overlap": "DDP：反向传播还在进行时，已算好的梯度桶就开始全归约", "colon": "：",
    },
}

FONTS = ("'Noto Sans','Noto Sans CJK SC','Source Han Sans SC','PingFang SC','Microsoft YaHei',"
         "'WenQuanYi Micro Hei',sans-serif")
STYLE = """<style>
text{font-family:FONTS;font-size:14px;fill:#222}
.box{fill:#e8f3f6;stroke:#0a7d91;stroke-width:1.5}
.back{fill:#fdf1e6;stroke:#c46a12;stroke-width:1.5}
.arrow{stroke:#444;stroke-width:1.5;fill:none;marker-end:url(#head)}
.title{font-weight:bold;font-size:15px}
.small{font-size:12px;fill:#555}
</style>
<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7"
 orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker></defs>""".replace(
    "FONTS", FONTS)


def svg(width: int, height: int, body: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n{STYLE}\n{body}\n</svg>\n')


def box(x, y, w, h, label, cls="box", text_cls=""):
    return (f'<rect class="{cls}" x="{x}" y="{y}" width="{w}" height="{h}" rx="6"/>'
            f'<text class="{text_cls}" x="{x + w / 2}" y="{y + h / 2 + 5}" '
            f'text-anchor="middle">{label}</text>')


def arrow(x1, y1, x2, y2):
    return f'<path class="arrow" d="M{x1},{y1} L{x2},{y2}"/>'


def frontend_backend_mxnet(t: dict) -> str:
    body = [
        f'<text class="title" x="20" y="24">{t["frontend"]}</text>',
        box(20, 40, 140, 40, "Python"), box(20, 95, 140, 40, t["others"]),
        arrow(160, 60, 230, 100), arrow(160, 115, 230, 108),
        box(232, 80, 150, 50, t["queue"]),
        arrow(382, 105, 440, 105),
        f'<text class="title" x="450" y="24">{t["backend"]}</text>',
        box(450, 40, 180, 40, t["deps"], "back"),
        box(450, 95, 85, 40, t["threads"], "back", "small"),
        box(545, 95, 85, 40, t["gpu"], "back", "small"),
    ]
    return svg(650, 150, "\n".join(body))


def frontend_backend_torch(t: dict) -> str:
    body = [
        f'<text class="title" x="20" y="24">{t["frontend"]}</text>',
        f'<text class="title" x="270" y="24">{t["backend"]}</text>',
        box(20, 80, 150, 40, t["call"]),
        arrow(170, 92, 258, 62), arrow(170, 108, 258, 138),
        f'<text class="small" x="172" y="62">{t["cpu_tensor"]}</text>',
        f'<text class="small" x="172" y="148">{t["cuda_tensor"]}</text>',
        box(260, 40, 190, 40, t["inline"], "back", "small"),
        f'<text class="small" x="460" y="65">→ {t["returns_done"]}</text>',
        box(260, 120, 110, 40, t["launch"], "box", "small"),
        f'<text class="small" x="262" y="178">→ {t["returns_now"]}</text>',
        arrow(370, 140, 400, 140),
        box(402, 120, 210, 40, t["stream"], "back", "small"),
        arrow(612, 140, 642, 140),
        box(644, 120, 60, 40, t["device"], "back"),
    ]
    return svg(720, 190, "\n".join(body))


def data_parallel(t: dict) -> str:
    body = [box(20, 70, 110, 40, t["minibatch"]), arrow(130, 82, 170, 52), arrow(130, 98, 170, 128)]
    for i, y in enumerate((30, 110)):
        body += [box(172, y, 90, 40, f'{t["shard"]} {i + 1}'), arrow(262, y + 20, 292, y + 20),
                 box(294, y, 170, 40, f'GPU {i}{t["colon"]}{t["fwd_bwd"]}', "back", "small"),
                 arrow(464, y + 20, 494, 90 if i else 70),
                 arrow(704, 90 if i else 70, 734, y + 20),
                 box(736, y, 120, 40, t["update"], "box", "small")]
    body.append(box(496, 55, 206, 50, t["allreduce"], "back", "small"))
    # DDP's overlap: backward runs bucket by bucket, each bucket's all-reduce starts at once
    top = 190
    body += [f'<text class="title" x="20" y="{top}">{t["overlap"]}</text>',
             f'<text class="small" x="20" y="{top + 32}">{t["compute"]}</text>',
             f'<text class="small" x="20" y="{top + 72}">{t["comm"]}</text>',
             box(110, top + 14, 150, 28, t["fwd"], "box", "small")]
    for j, b in enumerate((3, 2, 1)):
        x = 260 + 130 * j
        label = f'{t["bwd"]}{t["colon"]}{t["bucket"]} {b}'
        body.append(box(x, top + 14, 130, 28, label, "back", "small"))
        body.append(box(x + 130, top + 54, 120, 28, f'{t["ar"]} {b}', "box", "small"))
        body.append(arrow(x + 130, top + 42, x + 132, top + 53))
    body += [box(770, top + 14, 80, 28, t["opt"], "box", "small"),
             arrow(110, top + 100, 860, top + 100),
             f'<text class="small" x="820" y="{top + 118}">{t["time"]}</text>']
    return svg(880, top + 130, "\n".join(body))


def dependency_graph(t: dict) -> str:
    body = [
        box(20, 20, 60, 36, "x"), box(20, 90, 60, 36, "y"),
        arrow(80, 38, 150, 64), arrow(80, 108, 150, 82),
        box(152, 55, 60, 36, "×", "back"),
        box(152, 125, 60, 36, t["const"]),
        arrow(212, 73, 282, 96), arrow(212, 143, 282, 112),
        box(284, 86, 60, 36, "+", "back"),
        arrow(344, 104, 400, 104), box(402, 86, 60, 36, "z"),
    ]
    return svg(480, 175, "\n".join(body))


def timeline(t: dict) -> str:
    ops = ["x", "y", "x*y", "+2"]
    body = [f'<text class="title" x="10" y="45">{t["frontend"]}</text>',
            f'<text class="title" x="10" y="115">{t["backend"]}</text>',
            arrow(100, 150, 640, 150), f'<text class="small" x="600" y="170">{t["time"]}</text>']
    for i, op in enumerate(ops):
        body.append(box(100 + 45 * i, 28, 40, 26, op, "box", "small"))
        body.append(box(150 + 105 * i, 98, 95, 26, op, "back", "small"))
        body.append(arrow(120 + 45 * i, 54, 197 + 105 * i, 97))
    body.append(box(290, 28, 270, 26, t["wait"], "box", "small"))
    body.append(arrow(570, 124, 570, 56))
    return svg(660, 180, "\n".join(body))


#: Each diagram: its file name (without ``.svg``) and the function that draws it.
DIAGRAMS = [("frontend-backend-torch", frontend_backend_torch),
            ("frontend-backend-mxnet", frontend_backend_mxnet),
            ("dependency-graph", dependency_graph), ("timeline", timeline),
            ("data-parallel", data_parallel)]


def main() -> None:
    """Write every diagram in every language into ``chapters/LANG/img``."""
    for lang, t in TEXT.items():
        out = ROOT / "chapters" / lang / "img"
        out.mkdir(parents=True, exist_ok=True)
        for name, draw in DIAGRAMS:
            (out / f"{name}.svg").write_text(draw(t), encoding="utf-8")


if __name__ == "__main__":
    main()
