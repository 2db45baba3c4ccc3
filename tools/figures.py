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
        "deps": "dependency tracking", "issue": "issue", "execute": "execute",
        "time": "time", "wait": "print(z): waits", "const": "2",
    },
    "zh": {
        "frontend": "前端", "backend": "后端", "queue": "操作队列",
        "threads": "工作线程", "gpu": "GPU 流", "others": "C++、Scala、R……",
        "deps": "依赖跟踪", "issue": "发出", "execute": "执行",
        "time": "时间", "wait": "print(z)：等待", "const": "2",
    },
}

FONTS = "'Noto Sans','Noto Sans CJK SC','PingFang SC','Microsoft YaHei',sans-serif"
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


def frontend_backend(t: dict) -> str:
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


def main() -> None:
    for lang, t in TEXT.items():
        out = ROOT / "chapters" / lang / "img"
        out.mkdir(parents=True, exist_ok=True)
        for name, draw in [("frontend-backend", frontend_backend),
                           ("dependency-graph", dependency_graph), ("timeline", timeline)]:
            (out / f"{name}.svg").write_text(draw(t), encoding="utf-8")


if __name__ == "__main__":
    main()
