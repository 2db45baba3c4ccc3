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
        "seams_tp": "tensor parallelism", "seams_sp": "with sequence parallelism",
        "seams_input": "input", "seams_attention": "attention",
        "seams_whole": "whole on every process",
        "seams_features": "split by heads or features", "seams_sequence": "split by sequence",
        "seams_key": ("F: forward, B: backward; AR all-reduce, AG all-gather, RS reduce-scatter, "
                      "— nothing; LN LayerNorm"),
        "seams_f": "F: ", "seams_b": "B: ", "seams_ar": "AR", "seams_ag": "AG", "seams_rs": "RS",
        "seams_ln": "LN",
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
        "seams_tp": "张量并行", "seams_sp": "加上序列并行",
        "seams_input": "输入", "seams_attention": "注意力", "seams_whole": "每个进程上都是完整的",
        "seams_features": "按头或特征切分", "seams_sequence": "按序列切分",
        "seams_key": "前：前向传播；反：反向传播；—：不通信；LN：层规范化",
        "seams_f": "前：", "seams_b": "反：", "seams_ar": "全归约", "seams_ag": "全收集",
        "seams_rs": "归约散射", "seams_ln": "LN",
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


# ---- the communication chapter: the ring's two phases, a parameter server, bucketed overlap
TEXT["en"].update({
    "ring_start": "start", "ring_rs": "reduce-scatter", "ring_ag": "all-gather",
    "ring_count": "n: the chunk holds the sum of n GPUs' data",
    "ring_changed": "received and updated in this step",
    "ring_send": "every step: GPU r sends one chunk to GPU r + 1 (mod 4)",
    "ps_one": "one server", "ps_sharded": "sharded servers", "ps_server": "server",
    "ps_worker": "worker", "ps_shard": "shard", "ps_push": "push gradients, pull sums",
    "ps_one_load": "the server's link carries all k workers' data each way",
    "ps_sharded_load": "each server's link carries 1/s of all the data (s = 2)",
    "ov_one": "one bucket, all-reduced after the backward pass",
    "ov_two": "two buckets, each all-reduced as soon as it is full",
    "ar_all": "all-reduce: all gradients", "ar_bucket": "all-reduce: bucket",
    "exposed": "exposed",
})
TEXT["zh"].update({
    "ring_start": "开始", "ring_rs": "归约散射", "ring_ag": "全收集",
    "ring_count": "数字 n：这一块已累加了 n 块 GPU 的数据",
    "ring_changed": "本步收到并更新的块",
    "ring_send": "每一步：GPU r 把一块发给 GPU r + 1（模 4）",
    "ps_one": "一个服务器", "ps_sharded": "分片的服务器", "ps_server": "服务器",
    "ps_worker": "工作进程", "ps_shard": "分片", "ps_push": "推送梯度，拉取总和",
    "ps_one_load": "服务器的链路每个方向承载全部 k 个工作进程的数据",
    "ps_sharded_load": "每个服务器的链路只承载全部数据的 1/s（s = 2）",
    "ov_one": "一个桶：反向传播结束后才全归约",
    "ov_two": "两个桶：每个桶一装满就开始全归约",
    "ar_all": "全归约：全部梯度", "ar_bucket": "全归约：桶",
    "exposed": "暴露",
})

RING_FILL = ("#ffffff", "#d6eef2", "#9fd3dc", "#0a7d91")  # a chunk summing 1, 2, 3, 4 GPUs


def ring_states(k: int = 4) -> list[tuple[list[list[frozenset]], set]]:
    """The ring all-reduce's state after each step: which GPUs' data each chunk of each GPU
    sums, and which (GPU, chunk) pairs the step changed. In reduce-scatter step s, GPU r adds
    to its chunk (r - s) mod k what GPU r - 1 sent; in all-gather step s it copies chunk
    (r + 1 - s) mod k."""
    state = [[frozenset({r}) for _ in range(k)] for r in range(k)]
    states = [([row[:] for row in state], set())]
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(k - 1):
            new, changed = [row[:] for row in state], set()
            for r in range(k):
                to = (r + 1) % k
                j = (r - s) % k if phase == "reduce-scatter" else (r + 1 - s) % k
                new[to][j] = state[to][j] | state[r][j] if phase == "reduce-scatter" \
                    else state[r][j]
                changed.add((to, j))
            state = new
            states.append(([row[:] for row in state], changed))
    return states


def ring_allreduce(t: dict) -> str:
    k, x0, y0, col = 4, 195, 80, 95
    body = []
    for r in range(k):  # the ring itself, GPU 0 at the top, clockwise
        cx, cy = 70 + 45 * [0, 1, 0, -1][r], 160 + 45 * [-1, 0, 1, 0][r]
        nx, ny = 70 + 45 * [1, 0, -1, 0][r], 160 + 45 * [0, 1, 0, -1][r]
        body.append(arrow(cx + (nx - cx) * 0.35, cy + (ny - cy) * 0.35,
                          cx + (nx - cx) * 0.65, cy + (ny - cy) * 0.65))
        body.append(f'<circle cx="{cx}" cy="{cy}" r="15" class="box"/>'
                    f'<text class="small" x="{cx}" y="{cy + 4}" text-anchor="middle">{r}</text>')
    body.append('<text class="small" x="70" y="164" text-anchor="middle">GPU</text>')
    for c, (state, changed) in enumerate(ring_states(k)):
        for r in range(k):
            for j in range(k):
                n = len(state[r][j])
                x, y = x0 + c * col + j * 20, y0 + r * 40
                edge = 'stroke="#c46a12" stroke-width="2.5"' if (r, j) in changed \
                    else 'stroke="#0a7d91" stroke-width="1"'
                ink = "#ffffff" if n == k else "#222"
                body.append(f'<rect x="{x}" y="{y}" width="18" height="26" rx="3" '
                            f'fill="{RING_FILL[n - 1]}" {edge}/>'
                            f'<text class="small" style="fill:{ink}" x="{x + 9}" y="{y + 17}" '
                            f'text-anchor="middle">{n}</text>')
    for r in range(k):
        body.append(f'<text class="small" x="145" y="{y0 + r * 40 + 18}">GPU {r}</text>')
    heads = [(0, 1, t["ring_start"]), (1, 3, t["ring_rs"]), (4, 3, t["ring_ag"])]
    for first, span, label in heads:
        left, right = x0 + first * col, x0 + (first + span) * col - 17
        body.append(f'<text class="title" x="{(left + right) / 2}" y="40" '
                    f'text-anchor="middle">{label}</text>')
        if span > 1:
            body.append(f'<path d="M{left},48 L{right},48" stroke="#444" stroke-width="1"/>')
            body += [f'<text class="small" x="{x0 + (first + i) * col + 39}" y="66" '
                     f'text-anchor="middle">{i + 1}</text>' for i in range(span)]
    body += [f'<rect x="20" y="262" width="18" height="20" rx="3" fill="{RING_FILL[2]}" '
             f'stroke="#0a7d91"/><text class="small" x="29" y="277" text-anchor="middle">3</text>',
             f'<text class="small" x="46" y="277">{t["ring_count"]}</text>',
             '<rect x="380" y="262" width="18" height="20" rx="3" fill="#ffffff" '
             'stroke="#c46a12" stroke-width="2.5"/>',
             f'<text class="small" x="406" y="277">{t["ring_changed"]}</text>',
             f'<text class="small" x="20" y="305">{t["ring_send"]}</text>']
    return svg(880, 320, "\n".join(body))


def both_ways(x1, y1, x2, y2):
    return (f'<path class="arrow" style="marker-start:url(#head)" '
            f'd="M{x1},{y1} L{x2},{y2}"/>')


def parameter_server(t: dict) -> str:
    body = [f'<text class="title" x="20" y="24">{t["ps_one"]}</text>',
            f'<text class="title" x="470" y="24">{t["ps_sharded"]}</text>',
            box(150, 45, 120, 36, t["ps_server"], "back")]
    workers = [(20 + 100 * i, 470 + 100 * i) for i in range(4)]
    for i, (left, right) in enumerate(workers):
        label = f'{t["ps_worker"]} {i}'
        body += [box(left, 175, 90, 36, label, "box", "small"),
                 both_ways(left + 45, 173, 210, 83),
                 box(right, 175, 90, 36, label, "box", "small")]
        for s in range(2):
            body.append(both_ways(right + 45, 173, 580 + 180 * s, 83))
    for s in range(2):
        body.append(box(510 + 180 * s, 45, 140, 36,
                        f'{t["ps_server"]} {s}{t["colon"]}{t["ps_shard"]} {s}', "back", "small"))
    body += [f'<text class="small" x="20" y="120">{t["ps_push"]}</text>',
             f'<text class="small" x="20" y="236">{t["ps_one_load"]}</text>',
             f'<text class="small" x="470" y="236">{t["ps_sharded_load"]}</text>',
             '<path d="M440,20 L440,240" stroke="#bbb" stroke-width="1"/>']
    return svg(880, 250, "\n".join(body))


def bucket_overlap(t: dict) -> str:
    body = []
    for top, two in ((0, False), (140, True)):
        body += [f'<text class="title" x="20" y="{top + 24}">{t["ov_two" if two else "ov_one"]}'
                 '</text>',
                 f'<text class="small" x="20" y="{top + 58}">{t["compute"]}</text>',
                 f'<text class="small" x="20" y="{top + 98}">{t["comm"]}</text>',
                 box(110, top + 38, 120, 28, t["fwd"], "box", "small")]
        for i, layer in enumerate((4, 3, 2, 1)):
            body.append(box(230 + 80 * i, top + 38, 80, 28, f'{t["bwd"]} L{layer}', "back",
                            "small"))
        if two:
            body += [box(390, top + 78, 120, 28, f'{t["ar_bucket"]} 1', "box", "small"),
                     arrow(390, top + 66, 392, top + 77),
                     box(550, top + 78, 120, 28, f'{t["ar_bucket"]} 2', "box", "small"),
                     arrow(550, top + 66, 552, top + 77)]
            end = 670
        else:
            body += [box(550, top + 78, 240, 28, t["ar_all"], "box", "small"),
                     arrow(550, top + 66, 552, top + 77)]
            end = 790
        body += [box(end, top + 38, 60, 28, t["opt"], "box", "small"),
                 f'<path d="M550,{top + 114} L{end},{top + 114}" stroke="#c46a12" '
                 f'stroke-width="2"/>',
                 f'<text class="small" x="{(550 + end) / 2}" y="{top + 128}" '
                 f'text-anchor="middle">{t["exposed"]}</text>']
    body += [arrow(110, 285, 860, 285), f'<text class="small" x="820" y="303">{t["time"]}</text>']
    return svg(880, 315, "\n".join(body))


# ---- the memory chapter: what one FSDP2 process holds at each moment of a step
TEXT["en"].update({
    "fsdp_title": "What one of 8 FSDP2 processes holds: 4 equal units, bfloat16 compute "
                  "(activations and temporaries aside)",
    "fsdp_sharded": "shards: float32 weights, Adam, gradients so far",
    "fsdp_gathered": "this unit's weights, gathered",
    "fsdp_all_gather": "all-gather buffers (this unit's, a neighbour's)",
    "fsdp_gradients": "this unit's gradients",
    "fsdp_reduce_scatter": "reduce-scatter input still in flight",
    "fsdp_unit": "bytes of one unit in bfloat16", "fsdp_fwd": "fwd", "fsdp_bwd": "bwd",
})
TEXT["zh"].update({
    "fsdp_title": "8 个 FSDP2 进程之一持有的显存：4 个等大的单元，以 bfloat16 计算"
                  "（不含激活和临时张量）",
    "fsdp_sharded": "分片：float32 权重、Adam 状态、已算出的梯度",
    "fsdp_gathered": "当前单元的权重（已全收集）",
    "fsdp_all_gather": "全收集缓冲区（当前单元的、相邻单元的）",
    "fsdp_gradients": "当前单元的梯度",
    "fsdp_reduce_scatter": "仍在进行的归约散射的输入",
    "fsdp_unit": "一个单元的 bfloat16 字节数", "fsdp_fwd": "前向", "fsdp_bwd": "反向",
})

FSDP_FILL = {"sharded": "#c9d3dc", "gathered": "#0a7d91", "all_gather": "#9fd3dc",
             "gradients": "#e59a4c", "reduce_scatter": "#f6d0a8"}


def fsdp_moments(t: dict) -> str:
    """Stacked bars of :func:`d2l_ext.memory_budget.fsdp2_moments` for 4 units of 8 processes."""
    from d2l_ext.memory_budget import fsdp2_moments

    unit = 2.0  # bytes per parameter in bfloat16: one unit's gathered weights = 1 on the axis
    moments = fsdp2_moments([1, 1, 1, 1], 8)
    scale, base, left = 22, 268, 90  # pixels per unit's bfloat16 bytes
    body = [f'<text class="title" x="20" y="24">{t["fsdp_title"]}</text>',
            f'<path d="M{left - 10},{base} L{left + 8 * 70},{base}" stroke="#444"/>']
    for level in range(0, 10):
        y = base - level * scale
        body += [f'<path d="M{left - 14},{y} L{left - 10},{y}" stroke="#444"/>',
                 f'<text class="small" x="{left - 18}" y="{y + 4}" text-anchor="end">{level}'
                 '</text>']
    body.append(f'<text class="small" x="{left - 60}" y="{base - 10 * scale + 4}">'
                f'{t["fsdp_unit"]}</text>')
    for i, m in enumerate(moments):
        x, y = left + 70 * i + 12, base
        for part in FSDP_FILL:
            h = getattr(m, part) / unit * scale
            if h:
                y -= h
                body.append(f'<rect x="{x}" y="{y:.1f}" width="46" height="{h:.1f}" '
                            f'fill="{FSDP_FILL[part]}" stroke="#fff"/>')
        kind, unit_no = m.label.split()
        body.append(f'<text class="small" x="{x + 23}" y="{base + 16}" text-anchor="middle">'
                    f'{t["fsdp_fwd" if kind == "forward" else "fsdp_bwd"]} {unit_no}</text>')
    for j, part in enumerate(FSDP_FILL):
        y = 50 + 22 * j
        body += [f'<rect x="{left + 8 * 70 + 20}" y="{y}" width="14" height="14" '
                 f'fill="{FSDP_FILL[part]}"/>',
                 f'<text class="small" x="{left + 8 * 70 + 40}" y="{y + 12}">'
                 f'{t["fsdp_" + part]}</text>']
    return svg(1000, 292, "\n".join(body))


# ---- the memory chapter: what each of 4 data-parallel processes holds under DDP and ZeRO-1/2/3
TEXT["en"].update({
    "zero_title": "What each of 4 data-parallel processes holds (float32 weights, gradients, "
                  "Adam: 4 + 4 + 8 bytes per parameter)",
    "zero_weights": "weights", "zero_grads": "gradients", "zero_adam": "Adam state",
    "zero_other": "held by another process", "zero_rank": "process",
    "zero_per_rank": "bytes per process",
})
TEXT["zh"].update({
    "zero_title": "4 个数据并行进程各自持有什么（float32 权重、梯度、Adam 状态：每个参数"
                  " 4 + 4 + 8 字节）",
    "zero_weights": "权重", "zero_grads": "梯度", "zero_adam": "Adam 状态",
    "zero_other": "由其他进程持有", "zero_rank": "进程",
    "zero_per_rank": "每个进程的字节数",
})

#: the three parts of the training state: their widths (bytes per parameter) and fills
ZERO_PARTS = (("weights", 4, "#0a7d91"), ("grads", 4, "#e59a4c"), ("adam", 8, "#5b8c2a"))
#: each strategy: which of the parts (by index) it shards across the processes
ZERO_STAGES = (("DDP", ()), ("ZeRO-1", (2,)), ("ZeRO-2", (1, 2)), ("ZeRO-3", (0, 1, 2)))


def zero_stages(t: dict) -> str:
    """Four panels (DDP, ZeRO-1, ZeRO-2, ZeRO-3), one row per process: each part of the
    state is full, or the process's quarter of it (the rest outlined: another process's)."""
    k, unit, row = 4, 10, 26  # processes; pixels per byte of a parameter; pixels per row
    body = [f'<text class="title" x="20" y="24">{t["zero_title"]}</text>']
    for p, (name, sharded) in enumerate(ZERO_STAGES):
        left, top = 70 + p * 205, 70
        body.append(f'<text class="title" x="{left + 80}" y="{top - 12}" '
                    f'text-anchor="middle">{name}</text>')
        for rank in range(k):
            y, x = top + rank * row, left
            if p == 0:
                body.append(f'<text class="small" x="{left - 8}" y="{y + 15}" '
                            f'text-anchor="end">{t["zero_rank"]} {rank}</text>')
            for i, (_, width, fill) in enumerate(ZERO_PARTS):
                w = width * unit
                if i in sharded:
                    body.append(f'<rect x="{x}" y="{y}" width="{w}" height="20" fill="none" '
                                f'stroke="{fill}" stroke-dasharray="3,2"/>')
                    body.append(f'<rect x="{x + rank * w / k:g}" y="{y}" width="{w / k:g}" '
                                f'height="20" fill="{fill}" stroke="#fff"/>')
                else:
                    body.append(f'<rect x="{x}" y="{y}" width="{w}" height="20" fill="{fill}" '
                                f'stroke="#fff"/>')
                x += w
        held = sum(width / (k if i in sharded else 1) for i, (_, width, _) in enumerate(ZERO_PARTS))
        body.append(f'<text class="small" x="{left + 80}" y="{top + k * row + 16}" '
                    f'text-anchor="middle">{t["zero_per_rank"]}{t["colon"]}{held:g}P</text>')
    legend = [(f"zero_{part}", f'fill="{fill}"') for part, _, fill in ZERO_PARTS]
    legend.append(("zero_other", 'fill="none" stroke="#444" stroke-dasharray="3,2"'))
    x = 70
    for key, style in legend:
        body += [f'<rect x="{x}" y="{212}" width="14" height="14" {style}/>',
                 f'<text class="small" x="{x + 20}" y="{224}">{t[key]}</text>']
        x += 190
    return svg(900, 240, "\n".join(body))


SEAM_FILLS = {"whole": "#dbe9f6", "features": "#fbe3c8", "sequence": "#d9f0d3"}


def tp_seams(t: dict) -> str:
    """One block's forward chain under tensor parallelism and with sequence parallelism:
    what each part holds (whole, split by heads or features, split by sequence), and what
    the collectives at the seams do in the forward (F) and backward (B) pass."""
    f, b, ar, ag, rs = (t[k] for k in ("seams_f", "seams_b", "seams_ar", "seams_ag", "seams_rs"))
    rows = [("seams_tp", "whole", (f + "—", b + ar), (f + ar, b + "—")),
            ("seams_sp", "sequence", (f + ag, b + rs), (f + rs, b + ag))]
    seam = 14 + max(sum(12 if ord(c) > 0x2e80 else 7 for c in line)  # 12 px type
                    for line in (f + rs, b + rs, f + ar, b + ag))
    body = []
    for r, (title, around, first, second) in enumerate(rows):
        top = 40 + r * 110
        body.append(f'<text class="title" x="20" y="{top - 10}">{t[title]}</text>')
        parts = [("seams_input", around), ("LN", around), first, ("seams_attention", "features"),
                 second, ("+", around), ("LN", around), first, ("MLP", "features"), second,
                 ("+", around)]
        x = 20
        for part in parts:
            if part[0].startswith(f):  # a seam: what it sends, forward and backward
                body.append(f'<rect x="{x}" y="{top + 6}" width="{seam}" height="38" rx="4" '
                            f'fill="#fff" stroke="#c46a12" stroke-dasharray="4,2"/>')
                for i, line in enumerate(part):
                    body.append(f'<text class="small" x="{x + seam / 2}" y="{top + 22 + 15 * i}" '
                                f'text-anchor="middle">{line}</text>')
                x += seam + 8
                continue
            name, held = part
            label = t.get(name, name) if name != "LN" else t["seams_ln"]
            width = 96 if name == "seams_attention" else 60
            body.append(f'<rect x="{x}" y="{top}" width="{width}" height="50" rx="6" '
                        f'fill="{SEAM_FILLS[held]}" stroke="#0a7d91"/>')
            body.append(f'<text x="{x + width / 2}" y="{top + 30}" text-anchor="middle">'
                        f'{label}</text>')
            x += width + 8
    right, x = x, 20
    for held, key in (("whole", "seams_whole"), ("features", "seams_features"),
                      ("sequence", "seams_sequence")):
        body += [f'<rect x="{x}" y="{215}" width="14" height="14" fill="{SEAM_FILLS[held]}" '
                 f'stroke="#0a7d91"/>',
                 f'<text class="small" x="{x + 20}" y="{227}">{t[key]}</text>']
        x += 250
    body.append(f'<text class="small" x="20" y="{255}">{t["seams_key"]}</text>')
    return svg(right + 12, 268, "\n".join(body))


#: Each diagram: its file name (without ``.svg``) and the function that draws it.
DIAGRAMS = [("frontend-backend-torch", frontend_backend_torch),
            ("frontend-backend-mxnet", frontend_backend_mxnet),
            ("dependency-graph", dependency_graph), ("timeline", timeline),
            ("data-parallel", data_parallel), ("ring-allreduce", ring_allreduce),
            ("parameter-server", parameter_server), ("bucket-overlap", bucket_overlap),
            ("fsdp-moments", fsdp_moments), ("zero-stages", zero_stages),
            ("tp-seams", tp_seams)]


def main() -> None:
    """Write every diagram in every language into ``chapters/LANG/img``."""
    for lang, t in TEXT.items():
        out = ROOT / "chapters" / lang / "img"
        out.mkdir(parents=True, exist_ok=True)
        for name, draw in DIAGRAMS:
            (out / f"{name}.svg").write_text(draw(t), encoding="utf-8")


if __name__ == "__main__":
    main()
