"""The planner as a calculator in the page: a form for the model, the split and the GPU, and
``planner.js`` (the formulas of :func:`d2l_ext.planner.plan`) filling in memory per GPU and
the step's time as the reader types. It runs wherever a notebook's HTML output may run
scripts: the book's site, Colab, and Jupyter once the notebook is trusted."""

from __future__ import annotations

import dataclasses
import html
import json
from importlib import resources

from d2l_ext import planner
from d2l_ext.i18n import message

#: Published shapes (the models' configuration files; GPT-3: Brown et al., 2020).
PRESETS = {
    "Llama 3.1 8B": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                         mlp="swiglu", tied=False, experts=1, top_k=1, dropout=False,
                         flash=True),
    "Llama 3.1 70B": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                          vocab=128256, mlp="swiglu", tied=False, experts=1, top_k=1,
                          dropout=False, flash=True),
    "Llama 3.1 405B": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                           vocab=128256, mlp="swiglu", tied=False, experts=1, top_k=1,
                           dropout=False, flash=True),
    "GPT-3 175B": dict(layers=96, hidden=12288, heads=96, kv_heads=0, ffn=0, vocab=50257,
                       mlp="gelu", tied=True, experts=1, top_k=1, dropout=True, flash=False),
    "Mixtral 8x7B": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                         mlp="swiglu", tied=False, experts=8, top_k=2, dropout=False,
                         flash=True),
}

_FIELDS = [  # name, English, Chinese, kind
    ("layers", "layers", "层数", "int"), ("hidden", "width h", "宽度 h", "int"),
    ("heads", "heads", "注意力头数", "int"),
    ("kv_heads", "key/value heads (0: as many)", "键值头数（0：与头数相同）", "int"),
    ("ffn", "MLP width (0: 4h)", "MLP 宽度（0：4h）", "int"),
    ("vocab", "vocabulary", "词表大小", "int"),
    ("mlp", "MLP kind", "MLP 种类", ("gelu", "swiglu")),
    ("experts", "experts", "专家数", "int"),
    ("top_k", "experts per token", "每个词元的专家数", "int"),
    ("tied", "embedding tied to the output layer", "嵌入与输出层共享权重", "bool"),
    ("dropout", "dropout", "暂退法", "bool"),
    ("flash", "fused attention (no s × s scores kept)", "融合注意力（不保存 s × s 的分数）",
     "bool"),
    ("seq", "sequence length", "序列长度", "int"),
    ("dp", "data-parallel (dp)", "数据并行（dp）", "int"),
    ("zero", "ZeRO stage", "ZeRO 阶段", ("0", "1", "2", "3")),
    ("tp", "tensor-parallel (tp)", "张量并行（tp）", "int"),
    ("sp", "sequence parallelism", "序列并行", "bool"),
    ("pp", "pipeline stages (pp)", "流水线阶段数（pp）", "int"),
    ("schedule", "schedule", "调度", planner.SCHEDULES),
    ("chunks", "chunks per stage (interleaved)", "每个阶段的块数（交错调度）", "int"),
    ("micro_batch", "sequences per micro-batch", "每个微批量的序列数", "int"),
    ("micro_batches", "micro-batches per step", "每步的微批量数", "int"),
    ("cp", "context-parallel (cp)", "上下文并行（cp）", "int"),
    ("ep", "expert-parallel (ep, within dp)", "专家并行（ep，在 dp 之内）", "int"),
    ("recompute", "recomputation", "重新计算", planner.RECOMPUTE),
    ("hardware", "GPU", "GPU 型号", tuple(planner.HARDWARE)),
    ("efficiency", "share of the peak the products reach", "矩阵乘法达到峰值的比例", "float"),
    ("headroom", "share of the memory kept free", "留出的显存比例", "share"),
]

_TEXT = {
    "memory": ("memory per GPU", "每块 GPU 的显存"),
    "time": ("one step", "一步的时间"),
    "seconds": ("seconds", "秒"),
    "total": ("total", "合计"),
    "step": ("step time", "每步时间"),
    "fits": ("Fits {gpu} ({memory} GB) with {free}% of it kept free, on {gpus} GPUs; "
             "{params} billion parameters; {tokens} tokens per second per GPU, a model FLOPs "
             "utilization of {mfu}%.",
             "{gpus} 块 {gpu}（{memory} GB），每块留出 {free}% 的显存之后放得下；"
             "参数量 {params}×10⁹；"
             "每块 GPU 每秒处理 {tokens} 个词元，模型 FLOPs 利用率 {mfu}%。"),
    "does_not_fit": ("Does not fit {gpu} ({memory} GB) with {free}% of it kept free, on "
                     "{gpus} GPUs: split more, shard with ZeRO or recompute; {params} billion "
                     "parameters.",
                     "{gpus} 块 {gpu}（{memory} GB），每块留出 {free}% 的显存之后放不下："
                     "可以切得更细、"
                     "用 ZeRO 分片或做重新计算。参数量 {params}×10⁹。"),
    "at_least_one": ("{name} must be a whole number of at least 1.",
                     "{name}必须是不小于 1 的整数。"),
    "at_least_zero": ("{name} must be a whole number, 0 or more.",
                      "{name}必须是不小于 0 的整数。"),
    "efficiency": ("The share of the peak is a number above 0 and at most 1.",
                   "峰值的比例必须大于 0 且不超过 1。"),
    "headroom": ("The share of the memory kept free is a number from 0 to below 1.",
                 "留出的显存比例必须不小于 0 且小于 1。"),
    "kv_heads": ("The key/value heads ({kv}) must divide the heads ({heads}).",
                 "键值头数（{kv}）必须整除头数（{heads}）。"),
    "hidden_heads": ("The width ({hidden}) must be a multiple of the heads ({heads}).",
                     "宽度（{hidden}）必须是头数（{heads}）的整数倍。"),
    "top_k": ("Experts per token ({top_k}) cannot exceed the experts ({experts}).",
              "每个词元的专家数（{top_k}）不能超过专家数（{experts}）。"),
    "ep_dp": ("ep ({ep}) must divide dp ({dp}): the experts are split over data-parallel "
              "processes.", "ep（{ep}）必须整除 dp（{dp}）：专家分布在数据并行的进程上。"),
    "tp_heads": ("tp ({tp}) must divide the heads ({heads}) and the key/value heads ({kv}).",
                 "tp（{tp}）必须整除头数（{heads}）和键值头数（{kv}）。"),
    "layers_pp": ("The layers ({layers}) must divide evenly among {n} pipeline chunks.",
                  "层数（{layers}）必须能平均分到 {n} 个流水线块上。"),
    "ep_experts": ("ep ({ep}) must divide the experts ({experts}).",
                   "ep（{ep}）必须整除专家数（{experts}）。"),
    "cp_seq": ("cp ({cp}) must divide the sequence ({seq}).",
               "cp（{cp}）必须整除序列长度（{seq}）。"),
    "interleaved": ("Interleaving needs the micro-batches ({micro_batches}) to be a multiple of "
                    "the stages ({pp}).",
                    "交错调度要求微批量数（{micro_batches}）是阶段数（{pp}）的整数倍。"),
    "preset": ("preset model", "预设模型"),
    "model_heading": ("Model", "模型"),
    "split_heading": ("Split", "切分"),
    "gpu_heading": ("GPU", "GPU"),
}

_PARTS = {
    "weights, gradients, optimizer": "权重、梯度与优化器状态",
    "activations": "激活",
    "loss (float32 logits)": "损失（float32 的 logits）",
    "pipeline bubble": "流水线气泡",
    "compute": "计算",
    "tensor-parallel collectives": "张量并行的集合通信",
    "context-parallel ring (exposed)": "上下文并行沿环传递的键值（未被掩盖的部分）",
    "recomputed layer, beyond the loss": "重新计算的那一层（超出损失的部分）",
    "data-parallel collectives (exposed)": "数据并行的集合通信（未被掩盖的部分）",
}

_STYLE = (".planner-calculator fieldset{display:grid;grid-template-columns:"
          "repeat(auto-fill,minmax(15em,1fr));gap:.3em 1em;margin:.4em 0}"
          ".planner-calculator label{display:flex;justify-content:space-between;"
          "align-items:center;gap:.4em;font-size:.9em}"
          ".planner-calculator input[type=number]{width:7em}"
          ".planner-calculator label.planner-bool{justify-content:flex-start}"
          ".planner-calculator table{display:inline-table;margin:.4em 1.5em .4em 0;"
          "vertical-align:top}.planner-calculator td:last-child{text-align:right}"
          ".planner-error{color:#b00020}")

#: What each choice of a select is called, in English and Chinese.
_OPTIONS = {
    "gelu": ("GELU", "GELU"), "swiglu": ("SwiGLU", "SwiGLU"),
    "1f1b": ("1F1B", "1F1B"), "gpipe": ("GPipe", "GPipe"),
    "interleaved": ("interleaved 1F1B", "交错 1F1B"),
    "none": ("none", "不重新计算"), "selective": ("selective", "选择性重新计算"),
    "full": ("full", "完全重新计算"),
}

DEFAULTS = dict(PRESETS["Llama 3.1 8B"], seq=8192, dp=8, zero=3, tp=1, sp=False, pp=1,
                schedule="1f1b", chunks=1, micro_batch=1, micro_batches=1, cp=1, ep=1,
                recompute="none", hardware="H100 SXM", efficiency=0.4, headroom=0.0)


def _field(name: str, title: str, kind, value, pick: int) -> str:
    label = html.escape(title)
    if kind == "bool":
        checked = " checked" if value else ""
        return (f'<label class="planner-bool"><input type="checkbox" name="{name}"{checked}> '
                f"{label}</label>")
    if isinstance(kind, tuple):
        options = "".join(f'<option value="{o}"{" selected" if str(o) == str(value) else ""}>'
                          f"{html.escape(_OPTIONS.get(o, (o, o))[pick])}</option>" for o in kind)
        return f'<label>{label} <select name="{name}">{options}</select></label>'
    step = {"float": ' step="0.01" min="0.01" max="1"',
            "share": ' step="0.01" min="0" max="0.99"'}.get(kind, ' step="1" min="0"')
    return f'<label>{label} <input type="number" name="{name}" value="{value}"{step}></label>'


def _html(lang: str, script: str, headroom: float) -> str:
    pick = 1 if lang == "zh" else 0
    text = {k: v[pick] for k, v in _TEXT.items()}
    text["parts"] = {k: (zh if lang == "zh" else k) for k, zh in _PARTS.items()}
    hardware = {name: dataclasses.asdict(h) for name, h in planner.HARDWARE.items()}
    titles = {name: (en, zh)[pick] for name, en, zh, _ in _FIELDS}
    kinds = {name: kind for name, _, _, kind in _FIELDS}
    text["titles"] = titles
    groups = [(text["model_heading"], ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
                                       "mlp", "experts", "top_k", "tied", "dropout", "flash"]),
              (text["split_heading"], ["seq", "dp", "zero", "tp", "sp", "pp", "schedule",
                                       "chunks", "micro_batch", "micro_batches", "cp", "ep",
                                       "recompute"]),
              (text["gpu_heading"], ["hardware", "efficiency", "headroom"])]
    presets = "".join(f'<option value="{html.escape(n)}">{html.escape(n)}</option>'
                      for n in PRESETS)
    values = dict(DEFAULTS, headroom=min(round(headroom, 2), 0.99))
    fieldsets = "".join(
        f"<fieldset><legend>{html.escape(title)}</legend>"
        + "".join(_field(n, titles[n], kinds[n], values[n], pick) for n in names)
        + "</fieldset>"
        for title, names in groups)
    data = {"labels": text, "presets": PRESETS, "hardware": hardware}
    attributes = " ".join(f"data-{k}='{html.escape(json.dumps(v, ensure_ascii=False))}'"
                          for k, v in data.items())
    return (f'<div class="planner-calculator" {attributes}><style>{_STYLE}</style>'
            f'<label>{html.escape(text["preset"])} <select name="preset">{presets}</select>'
            f"</label><form>{fieldsets}</form><div class=\"planner-result\"></div>"
            f"<script>{script}</script></div>")


def calculator(headroom: float = 0.0):
    """The calculator as an HTML output in the reader's language (both languages recorded
    while the book captures a run, so the Chinese edition shows its own), its verdict
    keeping a share ``headroom`` of the memory free to begin with."""
    from IPython.display import HTML

    if not 0 <= headroom < 1:
        raise ValueError(f"headroom is a share of the memory, from 0 to below 1, not {headroom}")
    script = resources.files("d2l_ext").joinpath("planner.js").read_text(encoding="utf-8")
    return HTML(str(message(en=_html("en", script, headroom),
                            zh=_html("zh", script, headroom))))


def part_name(part: str):
    """The name of one of :func:`d2l_ext.planner.plan`'s parts in the reader's language."""
    return message(en=part, zh=_PARTS[part])


_RECOMPUTE = {"none": "不重新计算", "selective": "选择性", "full": "完全"}


def recompute_name(kind: str):
    """A kind of recomputation (``"none"``, ``"selective"``, ``"full"``) in the reader's
    language."""
    return message(en=kind, zh=_RECOMPUTE[kind])


def split_name(split: planner.Split):
    """A split in a few words, in the reader's language: its degrees, ZeRO stage and
    recomputation."""
    parts = [f"tp {split.tp}", f"pp {split.pp}", f"cp {split.cp}"]
    en_recompute = {"none": "no recomputation", "selective": "selective recomputation",
                    "full": "full recomputation"}[split.recompute]
    sharded = split.dp * split.cp > 1  # ZeRO shards over the data- and context-parallel
    return message(
        en=f"dp {split.dp}{f' (ZeRO-{split.zero})' if sharded else ''}, {', '.join(parts)}, "
           f"{en_recompute}",
        zh=f"dp {split.dp}{f'（ZeRO-{split.zero}）' if sharded else ''}、{'、'.join(parts)}，"
           f"{_OPTIONS[split.recompute][1]}")


def option_name(option: str):
    """A schedule, MLP or recomputation as the calculator names it, in the reader's language."""
    en, zh = _OPTIONS[option]
    return message(en=en, zh=zh)
