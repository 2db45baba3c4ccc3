"""The chapters' exercise checks, kept out of the pages so that no page shows an answer.

A chapter's check cell names the exercise and passes the reader's answer, with the few
variables of the run that an answer depends on::

    syncing = None  # exercise 1: a set of letters, e.g. {"a", "b"}
    print(d2l.check_exercise("host-device-sync-measuring", 1, syncing))

:func:`check` returns the verdict in the reader's language (:func:`d2l_ext.i18n.message`):
the exercise's prompt while the answer is not set, else "Correct: ..." with why, or
"Not quite: ..." with a hint that does not give the answer away. The expected answers, the
reasons and the hints live here, keyed by (chapter, number) and, where the PyTorch and the
MXNet exercise differ, by framework. ``d2l.check_exercise`` is :func:`check` with the
framework of the ``d2l`` module that exports it (:func:`checker`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from d2l_ext.i18n import Text, message

__all__ = ["check", "checker", "exercises", "ExerciseError"]

FRAMEWORKS = ("torch", "mxnet")


class ExerciseError(KeyError):
    """An exercise that this module does not know, or a call that lacks what it needs."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Exercise:
    """How to check one exercise: ``judge(answer, run)`` returns the verdict; ``variables``
    are the (English, Chinese) names the prompt asks the reader to set; ``prompt`` replaces
    the usual prompt; ``blank`` says whether an answer is still unset."""

    judge: Callable[[Any, dict], Text]
    variables: tuple[str, ...] = ()
    prompt: tuple[str, str] | None = None
    blank: Callable[[Any], bool] | None = None


#: (chapter, number, framework or None) -> Exercise; filled by :func:`exercise` below.
EXERCISES: dict[tuple[str, int, str | None], Exercise] = {}


def exercise(chapter: str, number: int, *variables: str, framework: str | None = None,
             prompt: tuple[str, str] | None = None,
             blank: Callable[[Any], bool] | None = None) -> Callable:
    """Register the decorated ``judge(answer, run)`` as the check of an exercise."""
    def register(judge: Callable[[Any, dict], Text]) -> Callable[[Any, dict], Text]:
        EXERCISES[(chapter, number, framework)] = Exercise(judge, variables, prompt, blank)
        return judge
    return register


def exercises() -> list[tuple[str, int, str | None]]:
    """Every (chapter, number, framework) that has a check (framework None: both)."""
    return sorted(EXERCISES, key=lambda k: (k[0], k[1], k[2] or ""))


# ---------------------------------------------------------------- the verdicts
def correct(en: str = "", zh: str = "") -> Text:
    """"Correct: <why>" in the reader's language ("Correct." without a reason)."""
    return message(en=f"Correct: {en}" if en else "Correct.", zh=f"正确：{zh}" if zh else "正确。")


def not_quite(en: str, zh: str) -> Text:
    """"Not quite: <hint>" in the reader's language."""
    return message(en=f"Not quite: {en}", zh=f"还不对：{zh}")


def close(en: str, zh: str) -> Text:
    """"Close: <hint>": nearly right, for a reason the hint names."""
    return message(en=f"Close: {en}", zh=f"接近了：{zh}")


def prompt(number: int, entry: Exercise) -> Text:
    """"Exercise N: set X, then run this cell again." (or the exercise's own prompt)."""
    if entry.prompt is not None:
        en, zh = entry.prompt
        return message(en=f"Exercise {number}: {en}", zh=f"练习 {number}：{zh}")
    names = entry.variables
    en = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    zh = names[0] if len(names) == 1 else "、".join(names[:-1]) + " 和 " + names[-1]
    return message(en=f"Exercise {number}: set {en}, then run this cell again.",
                   zh=f"练习 {number}：给 {zh} 赋值，然后再运行这个单元格。")


def unset(answer: Any) -> bool:
    """Whether the reader has not answered yet: ``None``, or a tuple holding a ``None``."""
    return answer is None or (isinstance(answer, tuple) and any(a is None for a in answer))


#: The letters that name a choice in the book's exercises.
CHOICES = "abcdefgh"


def letters(answer: Any) -> set[str]:
    """The choices an answer names, lower-cased, however it is written: ``{"a", "b"}``,
    ``["B", "a"]``, ``"a, b"``, ``"both a and b"``, ``"cd and f"``, ``"(d) none of them"``,
    ``"I think a"`` or ``{"(a)"}``. Each run of Latin letters made only of choice letters
    (a to h) counts letter by letter; any other run is a word and counts for nothing."""
    if isinstance(answer, str):
        answer = [answer]
    runs = re.findall(r"[a-z]+", " ".join(map(str, answer)).lower())
    return {c for run in runs if set(run) <= set(CHOICES) for c in run}


def letter_choice(chapter: str, number: int, variable: str, answer: str,
                  why: tuple[str, str], hint: tuple[str, str], *,
                  framework: str | None = None, **options) -> None:
    """Register an exercise whose answer is a set of letters (``answer``, e.g. ``"cdf"``, in
    any order or form :func:`letters` reads): "Correct: <why>" or "Not quite: <hint>"."""
    def judge(value: Any, run: dict) -> Text:
        return correct(*why) if letters(value) == set(answer) else not_quite(*hint)
    exercise(chapter, number, variable, framework=framework, **options)(judge)


def number_answer(chapter: str, number: int, variable: str, why: tuple[str, str],
                  hint: tuple[str, str], *, within: tuple[float, float] | None = None,
                  exactly: Any = None, framework: str | None = None, **options) -> None:
    """Register an exercise whose answer is one number: :func:`near` its target (``within =
    (target, tolerance)``), or :func:`equal` to ``exactly``."""
    def judge(value: Any, run: dict) -> Text:
        right = near(value, *within) if within is not None else equal(value, exactly)
        return correct(*why) if right else not_quite(*hint)
    exercise(chapter, number, variable, framework=framework, **options)(judge)


def near(value: Any, target: float, tolerance: float) -> bool:
    """Whether ``value`` is a number within ``tolerance`` of ``target``."""
    try:
        return abs(float(value) - target) <= tolerance
    except (TypeError, ValueError):
        return False


def equal(value: Any, target: float) -> bool:
    """``value == target`` for numbers (ints, floats, numpy scalars), False otherwise."""
    try:
        return bool(value == target) and not isinstance(value, (str, bool))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- the entry point
def check(chapter: str, number: int, answer: Any = None, *, framework: str | None = None,
          **run: Any) -> Text:
    """The verdict on the reader's ``answer`` to exercise ``number`` of ``chapter``.

    ``run`` holds the variables of the reader's run that the answer depends on (each
    exercise's cell passes them). An unknown chapter or exercise raises
    :class:`ExerciseError`; so does an exercise that differs between the frameworks when
    ``framework`` is not given.
    """
    entry = _find(chapter, number, framework)
    blank = entry.blank or unset
    if blank(answer):
        return prompt(number, entry)
    return entry.judge(answer, run)


def checker(framework: str) -> Callable[..., Text]:
    """:func:`check` for one framework: what ``d2l.check_exercise`` is in ``d2l_ext.torch``
    and ``d2l_ext.mxnet``."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")

    def check_exercise(chapter: str, number: int, answer: Any = None, **run: Any) -> Text:
        """The verdict on the reader's answer to exercise ``number`` of ``chapter``, in the
        reader's language (:func:`d2l_ext.exercises.check`)."""
        return check(chapter, number, answer, framework=framework, **run)

    return check_exercise


def _find(chapter: str, number: int, framework: str | None) -> Exercise:
    if framework is not None and framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS} or None, not {framework!r}")
    chapters = sorted({c for c, _, _ in EXERCISES})
    if chapter not in chapters:
        raise ExerciseError(f"no exercises are checked for chapter {chapter!r}; known "
                            f"chapters: {', '.join(chapters)}")
    for key in ((chapter, number, framework), (chapter, number, None)):
        if key in EXERCISES:
            return EXERCISES[key]
    per_framework = [f for c, n, f in EXERCISES if (c, n) == (chapter, number) and f]
    if per_framework and framework is None:
        raise ExerciseError(f"exercise {number} of {chapter!r} differs between "
                            f"{' and '.join(per_framework)}: pass framework= (as "
                            f"d2l.check_exercise does)")
    known = sorted({n for c, n, f in EXERCISES if c == chapter and f in (None, framework)})
    raise ExerciseError(f"{chapter!r} has no checked exercise {number}"
                        f"{f' for {framework}' if framework else ''}; checked: "
                        f"{', '.join(map(str, known))}")


def _needs(run: dict, *names: str) -> list:
    """The run's variables ``names``, or an error naming those the cell did not pass."""
    missing = [n for n in names if n not in run]
    if missing:
        raise ExerciseError(f"this check needs the run's {', '.join(missing)}: pass "
                            f"{', '.join(f'{n}={n}' for n in missing)}")
    return [run[n] for n in names]


# ================================================================ asynchronous computation
@exercise("async-computation", 1, "prediction")
def _async_1(prediction: Any, run: dict) -> Text:
    predict_async, run_async, num_ops = _needs(run, "predict_async", "run_async", "num_ops")
    model = predict_async(4 * num_ops)
    if near(prediction, model, 0.1 * model):
        verdict = (f"Correct: the model predicts {model:.4f} s.",
                   f"正确：模型的预测是 {model:.4f} 秒。")
    else:
        verdict = (f"Not quite: use the formula for waiting once, N = {4 * num_ops:,}.",
                   f"还不对：请用“只等一次”的公式，N = {4 * num_ops:,}。")
    measured = run_async(4 * num_ops)
    off = measured / model - 1
    if round(abs(off), 2) == 0:
        then = (f"Measured: {measured:.4f} s, as the model predicts.",
                f"实测：{measured:.4f} 秒，与模型一致。")
    else:
        then = (f"Measured: {measured:.4f} s, {abs(off):.0%} "
                f"{'above' if off > 0 else 'below'} the model.",
                f"实测：{measured:.4f} 秒，比模型{'多' if off > 0 else '少'} {abs(off):.0%}。")
    return message(en=f"{verdict[0]}\n{then[0]}", zh=f"{verdict[1]}\n{then[1]}")


def _no_letters(answer: Any) -> bool:
    return answer is None or not letters(answer)


#: The lines that wait (exercise 2): PyTorch's CPU operators run synchronously.
_ASYNC_2_WAITING = {"cpu": set("abcde"), "accelerator": set("bce")}


@exercise("async-computation", 2, framework="torch", blank=_no_letters,
          prompt=("put the letters of the waiting lines into blocking.",
                  "把会等待的那几行的字母放进变量 blocking。"))
def _async_2_torch(blocking: Any, run: dict) -> Text:
    (device,) = _needs(run, "device")
    kind = "cpu" if device.type == "cpu" else "accelerator"
    if letters(blocking) == _ASYNC_2_WAITING[kind]:
        return correct(*{
            "cpu": ("on a CPU, PyTorch runs each operator before the call returns, so every "
                    "line waits.",
                    "在 CPU 上，PyTorch 在调用返回之前就执行完每个算子，所以每一行都会等待。"),
            "accelerator": ("only the lines that need a value on the host wait; the others "
                            "queue work for the device and return.",
                            "只有需要在主机上得到数值的那几行会等待；其余几行把工作排进设备的"
                            "队列就返回了。")}[kind])
    where = {"cuda": "GPU", "cpu": "CPU"}.get(device.type, device.type.upper())
    return not_quite(f"with {where} tensors, which calls return before the work is done?",
                     f"张量在 {where} 上时，哪些调用会在计算完成之前就返回？")


@exercise("async-computation", 2, framework="mxnet", blank=_no_letters,
          prompt=("put the letters of the waiting lines into blocking.",
                  "把会等待的那几行的字母放进变量 blocking。"))
def _async_2_mxnet(blocking: Any, run: dict) -> Text:
    if letters(blocking) == _ASYNC_2_WAITING["accelerator"]:
        return correct("MXNet's engine queues every operator, on a CPU too; only the lines "
                       "that need a value on the host wait.",
                       "MXNet 的引擎把每个算子都排进队列，在 CPU 上也是如此；只有需要在主机上"
                       "得到数值的那几行会等待。")
    return not_quite("which calls need a value on the host?", "哪些调用需要把值取回主机？")


# ================================================================ concise multi-GPU training
@exercise("multi-gpu-concise", 1, "batch_4", "lr_4")
def _multi_gpu_1(answer: Any, run: dict) -> Text:
    batch, lr = answer
    if equal(batch, 4 * 256) and near(lr, 0.4, 1e-9):
        return correct("with 4 times the examples per step, the linear scaling rule takes 4 "
                       "times the learning rate.",
                       "每一步的样本数变为 4 倍，按线性缩放规则，学习率也变为 4 倍。")
    return not_quite("both grow with the number of devices.", "两者都随设备数增长。")


def _shard_sizes(framework: str) -> list[int]:
    """The shard sizes of 10 examples over 3 devices, as this framework's d2l splits them."""
    if framework == "torch":
        import torch

        from d2l_ext import torch as d2l
        shards, _ = d2l.split_batch(torch.zeros(10, 2), torch.zeros(10), [d2l.cpu()] * 3)
    else:
        from mxnet import np

        from d2l_ext import mxnet as d2l
        shards, _ = d2l.split_batch(np.zeros((10, 2)), np.zeros(10),
                                    [d2l.cpu(i) for i in range(3)])
    return [int(s.shape[0]) for s in shards]


def _multi_gpu_2(framework: str) -> Callable[[Any, dict], Text]:
    def judge(shard_sizes: Any, run: dict) -> Text:
        try:
            given = [int(s) for s in shard_sizes]
        except (TypeError, ValueError):
            given = None
        if given == _shard_sizes(framework):
            return correct("the shards differ by at most one example, the larger ones first.",
                           "各分片的样本数最多相差一个，较大的分片在前。")
        return not_quite("the sizes add up to 10 and differ by at most one; which shards get "
                         "the extra example?",
                         "各分片大小之和为 10，彼此最多相差 1；多出来的那个样本分给了哪些分片？")
    return judge


for _framework in FRAMEWORKS:
    exercise("multi-gpu-concise", 2, "shard_sizes", framework=_framework)(
        _multi_gpu_2(_framework))


# ================================================================ tuning tips
@exercise("tuning-tips", 1, "t_fixed_ms", "t_image_ms", "overhead_bound")
def _tuning_1(answer: Any, run: dict) -> Text:
    t_fixed_ms, t_image_ms, overhead_bound = answer
    if (near(t_image_ms, 6 / 192, 1.5e-3) and near(t_fixed_ms, 8, 1e-2)
            and overhead_bound == True):  # noqa: E712 (True, 1 and numpy's True all count)
        return correct("8 ms of the 10 ms at a batch of 64 do not depend on the batch.",
                       "批量为 64 时，10 毫秒里有 8 毫秒与批量无关。")
    return not_quite("the slope between the two points is t_image, and t_fixed is what is "
                     "left of 10 ms after 64 images.",
                     "两点之间的斜率是 t_image，10 毫秒减去 64 张图像的时间就是 t_fixed。")


# tuning-tips-switches (its section page)
@exercise("tuning-tips-switches", 1, "unfused_bytes", "fused_bytes")
def _tuning_switches_1(answer: Any, run: dict) -> Text:
    unfused, fused = answer
    if equal(unfused, 44) and equal(fused, 8):
        return correct("6 reads and 5 writes of 4 bytes, against one of each.",
                       "读 6 次、写 5 次，每次 4 字节；融合后各一次。")
    return not_quite("x * 0.5 and x / sqrt(2) both read x; the last multiplication reads two "
                     "tensors. Each value is 4 bytes.",
                     "x * 0.5 和 x / sqrt(2) 都要读 x，最后的乘法读两个张量；每个值占 4 字节。")


_SMALL_VALUES = (1e-3, 1e-6, 1e-8, 1e-9)


def _zeros(framework: str) -> list[set[float]]:
    """Which of the small values become 0 in float16 and in bfloat16, as the framework
    stores them (MXNet has no bfloat16 array: float32's exponent, so float32's range)."""
    if framework == "torch":
        import torch

        return [{v for v in _SMALL_VALUES if torch.tensor(v, dtype=dtype).item() == 0}
                for dtype in (torch.float16, torch.bfloat16)]
    import numpy

    return [{v for v in _SMALL_VALUES if float(numpy.array(v, dtype=dtype)) == 0}
            for dtype in ("float16", "float32")]


def _tuning_switches_2(framework: str) -> Callable[[Any, dict], Text]:
    def judge(answer: Any, run: dict) -> Text:
        try:
            given = [{float(v) for v in numbers} for numbers in answer]
        except (TypeError, ValueError):
            given = None
        if given == _zeros(framework):
            return correct("below half of float16's smallest subnormal a number rounds to 0; "
                           "bfloat16 keeps float32's exponent, so all four survive, coarsely.",
                           "小于 float16 最小非规格化数的一半时，数会舍入为 0；bfloat16 保留了"
                           " float32 的指数，所以四个数都保得住，只是精度较粗。")
        return not_quite("float16's smallest positive number is about 6e-8 (a subnormal), "
                         "bfloat16 has float32's exponent; compare each number with them.",
                         "float16 能表示的最小正数约为 6 × 10⁻⁸（一个非规格化数），"
                         "bfloat16 的指数与 "
                         "float32 相同；拿每个数和它们比一比。")
    return judge


for _framework in FRAMEWORKS:
    exercise("tuning-tips-switches", 2, "zero_in_fp16", "zero_in_bf16", framework=_framework)(
        _tuning_switches_2(_framework))


# ---------------------------------------------------------------- its section page
# tuning-tips-ladder
@exercise("tuning-tips-ladder", 1, "chance_per_verdict", "expected_false_alarms")
def _tuning_ladder_1(answer: Any, run: dict) -> Text:
    chance, expected = answer
    if near(chance, 2 * 0.5 ** 6, 5e-4) and near(expected, 9 * 2 * 0.5 ** 6, 5e-3):
        return correct("all 6 rounds on the same side of 1, either side: 2 x 2^-6 = 1/32 per "
                       "verdict, and 9/32 (about 0.28) false alarms over 9 verdicts.",
                       "6 遍全落在 1 的同一边，两边都算：每个判定 2 × 2⁻⁶ = 1/32，9 个判定"
                       "预计有 9/32（约 0.28）个误报。")
    if near(chance, 0.5 ** 6, 5e-4):
        return close("that is one side only; a false alarm is \"faster\" or \"slower\".",
                     "这只算了一边；“更快”和“更慢”都是误报。")
    return not_quite("each round's ratio falls on either side of 1 with even odds; a verdict "
                     "needs every round on the same side. Multiply by the verdicts for the "
                     "expected number.",
                     "每一遍的比值落在 1 的哪一边机会均等；要作出判定，每一遍都得落在同一边。"
                     "再乘以判定的个数，就是预计的误报数。")


@exercise("tuning-tips-ladder", 2, "steps_to_pay", "epochs_to_pay")
def _tuning_ladder_2(answer: Any, run: dict) -> Text:
    steps, epochs = answer
    if near(steps, 40 / 0.002, 1.0) and near(epochs, 40 / 0.002 / 234, 0.6):
        return correct("40 s / 2 ms = 20,000 steps, about 85.5 epochs of 234 steps.",
                       "40 秒 / 2 毫秒 = 20,000 步，约合 85.5 轮（每轮 234 步）。")
    if near(steps, 40 / 2, 1.0):
        return close("mind the units: 2 ms is 0.002 s.", "注意单位：2 毫秒是 0.002 秒。")
    return not_quite("divide the one-off cost by what each step saves, then by the steps of "
                     "an epoch.",
                     "用一次性开销除以每步省下的时间，再除以一轮的步数。")


# ================================================================ host-device synchronisation
letter_choice("host-device-sync-measuring", 1, "syncing", "cdf", framework="torch",
              why=(".item() and print need a value, x[x > 0] a size.",
                   ".item() 和 print 需要数值，x[x > 0] 需要结果的大小。"),
              hint=("only operations that need a value or a result's size on the host wait "
                    "for the device.",
                    "只有需要在主机上得到数值或结果大小的操作，才会等待设备。"))
letter_choice("host-device-sync-measuring", 1, "syncing", "cdf", framework="mxnet",
              why=("float and print copy values to the host, x[x > 0] needs the result's "
                   "shape; the engine makes Python wait for them on a CPU too.",
                   "float 和 print 要把数值复制到主机，x[x > 0] 需要结果的形状；即使在 CPU "
                   "上，引擎也会让 Python 等它们算完。"),
              hint=("only operations that need a value or a result's shape on the host wait "
                    "for the engine.",
                    "只有需要在主机上得到数值或结果形状的操作，才会等待引擎。"))


@exercise("host-device-sync", 1, "num_steps_answer", "num_distinct_answer")
def _sync_1(answer: Any, run: dict) -> Text:
    steps, distinct = answer
    if equal(steps, 3) and equal(distinct, 4):
        return correct("the values change 3 times, so there are 4 of them.",
                       "数值变了 3 次，所以一共有 4 个不同的值。")
    return not_quite("count the places where a value differs from the one before it.",
                     "数一数有几处数值与前一个不同。")


_SYNC_2_HINT = ("count them with step_costs, as the table of counts above does, after adding "
                "the read to both losses.",
                "给两个损失都加上这次读取，再像上面的计数表那样用 step_costs 数一数。")
_SYNC_2_RIGHT = {
    "torch": ("the cost model expects neither step to get much slower: in the original the "
              "new wait falls at the start of the span B or inside it, and a single "
              "synchronisation makes no span B at all. What it costs is what the model leaves "
              "out: its latency, and the device's idle time right after it.",
              "按成本模型，两个版本的一步都不会明显变慢：在原始版本里，新增的等待落在 B 段的开头"
              "或其中；而只有一处同步时，根本形成不了 B 段。这次同步的代价在于模型没有计入的部分："
              "同步本身的延迟，以及紧随其后设备空闲的时间。"),
    "mxnet": ("float(...) waits in MXNDArraySyncCopyToCPU. The cost model expects neither "
              "step to get much slower: in the original the new wait falls at the start of "
              "the span B or inside it, and a single wait makes no span B at all. What it "
              "costs is what the model leaves out: its latency, and the engine's idle time "
              "right after it.",
              "float(...) 在 MXNDArraySyncCopyToCPU 里等待。按成本模型，两个版本的一步都不会"
              "明显变慢：在原始版本里，新增的等待落在 B 段的开头或其中；而只有一处等待时，根本形成"
              "不了 B 段。这次等待的代价在于模型没有计入的部分：等待本身的延迟，以及紧随其后引擎"
              "空闲的时间。"),
}


def _sync_2(framework: str) -> Callable[[Any, dict], Text]:
    def judge(syncs_with_item: Any, run: dict) -> Text:
        costs, final = _needs(run, "costs", "final")
        expected = (costs["original"]["syncs"] + 1, costs[final]["syncs"] + 1)
        try:
            given = tuple(syncs_with_item)
        except TypeError:
            given = None
        if given is not None and len(given) == 2 and all(map(equal, given, expected)):
            return correct(*_SYNC_2_RIGHT[framework])
        return not_quite(*_SYNC_2_HINT)
    return judge


for _framework in FRAMEWORKS:
    exercise("host-device-sync", 2, "syncs_with_item", framework=_framework)(
        _sync_2(_framework))


# ================================================================ GPU basics
number_answer("gpu-basics", 1, "copy_ms", within=(2**28 * 4 / 25e9 * 1e3, 1),
              why=("2^28 × 4 bytes = 1.07 GB, at 25 GB/s 43 ms.",
                   "2²⁸ × 4 字节 = 1.07 GB，按 25 GB/s 需要 43 毫秒。"),
              hint=("a float32 takes 4 bytes; divide the bytes by the bandwidth.",
                    "一个 float32 占 4 字节；用字节数除以带宽。"))


number_answer("gpu-basics", 2, "training_state_mb", within=(120, 1),
              why=("three copies of 10 million float32 numbers, 40 MB each.",
                   "三份 1000 万个 float32，每份 40 MB。"),
              hint=("count the parameters, one gradient per parameter and one momentum "
                    "value per parameter, at 4 bytes each.",
                    "参数、每个参数一个梯度、每个参数一个动量值，各占 4 字节。"))


@exercise("gpu-basics", 3, "intensity_batch")
def _gpu_3(intensity_batch: Any, run: dict) -> Text:
    n, b = 8192, 8
    if near(intensity_batch, 2 * n**2 * b / (4 * (n**2 + 2 * n * b)), 0.05):
        return correct("2n^2 b FLOPs over 4(n^2 + 2nb) bytes is about b/2 = 4 FLOP/byte, a "
                       "fifth of a ridge point of 20: memory-bound. The intensity grows with "
                       "the batch, and reaches 20 near b = 40.",
                       "2n^2 b 次浮点运算除以 4(n^2 + 2nb) 字节，约为 b/2 = 4 FLOP/字节，只有"
                       "脊点 20 的 1/5：受限于内存。算术强度随批量增大，b 约为 40 时达到 20。")
    return not_quite("the weights dominate the bytes, 4 bytes per element; divide the FLOPs "
                     "by the bytes.",
                     "字节数主要来自权重矩阵，每个元素 4 字节；用浮点运算次数除以字节数。")


letter_choice("gpu-basics-streams", 1, "makes_it_right", "ab", framework="torch",
              why=("the side stream must start after the fill, and both (a) and (b) ensure "
                   "that; record_stream only protects memory reuse.",
                   "侧流必须在填充之后才开始，（a）和（b）都能保证这一点；record_stream "
                   "只防止显存被提前复用。"),
              hint=("ask of each whether the sum can start before the fill has finished.",
                    "逐项想一想，求和是否可能在填充完成之前开始。"))
letter_choice("gpu-basics-streams", 1, "makes_it_wrong", "d", framework="mxnet",
              why=("the engine orders every read after the writes to the same array, on any "
                   "device and however long the queue.",
                   "无论在哪个设备上、队列有多长，引擎都会把每次读排在对同一数组的写之后。"),
              hint=("what does MXNet's engine know about the arrays that each operation reads "
                    "and writes?",
                    "MXNet 的引擎对每个操作读写哪些数组知道些什么？"))


def _is_false(answer: Any) -> bool:
    """``False`` however it is written: ``False``, ``0``, ``"false"``, or a one-element
    tensor or array holding false or 0 such as ``(a == b).all()`` (the data-parallel check
    always has two devices or more, so on every machine the slices' statistics differ)."""
    if isinstance(answer, str):
        return answer.strip().lower() in {"false", "0"}
    try:
        value = answer.item() if hasattr(answer, "item") else answer
    except (ValueError, RuntimeError, TypeError):  # not one element
        return False
    return isinstance(value, (bool, int, float)) and value == 0


@exercise("gpu-basics-streams", 2, "bn_outputs_match", framework="torch")
def _gpu_5_torch(bn_outputs_match: Any, run: dict) -> Text:
    if _is_false(bn_outputs_match):
        return correct("in training mode each replica normalises its slice with that slice's "
                       "mean and variance, not the whole batch's. nn.SyncBatchNorm would not "
                       "help: it synchronises over the processes of an initialised "
                       "torch.distributed process group, and a DataParallel program is one "
                       "process without one, where it computes a plain BatchNorm.",
                       "训练模式下，每个副本用自己那一片数据的均值和方差做规范化，"
                       "而不是用整个批量的。"
                       "nn.SyncBatchNorm 也帮不上忙：它在已初始化的 torch.distributed 进程组的"
                       "各进程之间同步，而 DataParallel 程序只有一个进程，没有进程组，这时它算的"
                       "就是普通的批量规范化。")
    return not_quite("in training mode, which examples does BatchNorm take its mean and "
                     "variance from in each replica?",
                     "训练模式下，每个副本中的批量规范化层用哪些样本来计算均值和方差？")


@exercise("gpu-basics-streams", 2, "bn_outputs_match", framework="mxnet")
def _gpu_5_mxnet(bn_outputs_match: Any, run: dict) -> Text:
    if _is_false(bn_outputs_match):
        return correct("in training mode each device normalises its slice with that slice's "
                       "mean and variance, not the whole batch's. "
                       "gluon.contrib.nn.SyncBatchNorm computes them over all the devices of "
                       "the process.",
                       "训练模式下，每个设备用自己那一片数据的均值和方差做规范化，"
                       "而不是用整个批量的。"
                       "gluon.contrib.nn.SyncBatchNorm 则在本进程的所有设备上计算这些统计量。")
    return not_quite("under autograd.record(), which examples does BatchNorm take its mean "
                     "and variance from on each device?",
                     "在 autograd.record() 之下，每个设备上的批量规范化层用哪些样本来计算均值和"
                     "方差？")


# ================================================================ communication
@exercise("communication", 1, "megabytes_sent")
def _comm_1(megabytes_sent: Any, run: dict) -> Text:
    if near(megabytes_sent, 2 * 7 / 8 * 100, 0.5):
        return correct("2 (k - 1) / k x 100 MB = 175 MB, in 14 chunks of 12.5 MB.",
                       "2(k - 1)/k × 100 MB = 175 MB，分 14 块发出，每块 12.5 MB。")
    if near(megabytes_sent, 100, 0.5) or near(megabytes_sent, 200, 0.5):
        return not_quite("count the chunks. Each of the 2 (k - 1) steps sends one chunk of "
                         "n / k bytes.",
                         "数一数块数。2(k - 1) 步中的每一步发送一块 n/k 字节。")
    return not_quite("reduce-scatter and all-gather each take k - 1 steps.",
                     "归约散射和全收集各需要 k - 1 步。")


@exercise("communication", 2, "ring_ms", "server_ms")
def _comm_2(answer: Any, run: dict) -> Text:
    ring_ms, server_ms = answer
    a, b, n, k = 50e-6, 10e9, 100e6, 4
    right_ring = (2 * (k - 1) * a + 2 * (k - 1) / k * n / b) * 1e3
    right_server = 2 * (k - 1) * (a + n / b) * 1e3
    if near(ring_ms, right_ring, 0.05) and near(server_ms, right_server, 0.05):
        return correct(f"ring {right_ring:.1f} ms (the latencies are only 0.3 ms of it), "
                       f"server {right_server:.1f} ms, four times the ring's bandwidth term.",
                       f"环 {right_ring:.1f} 毫秒（其中延迟只占 0.3 毫秒），服务器 "
                       f"{right_server:.1f} 毫秒，带宽项是环的 4 倍。")
    return not_quite("ring 2(k-1) alpha + 2 (k-1)/k n / beta; server 2(k-1)(alpha + n/beta).",
                     "环：2(k − 1)α + 2(k − 1)/k · n/β；服务器：2(k − 1)(α + n/β)。")


def _first_cause(err: Exception) -> str:
    """The line of a failed ``comm.spawn`` that says why: the failing rank's last line."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith(("(also", "The other"))]
    return causes[-1].strip() if lines[0].endswith("failed:") else lines[0]


def _problems_verdict(problems: list[Text], right: tuple[str, str]) -> Text:
    if problems:
        return message(en="Not quite: " + "; ".join(p.en for p in problems) + ".",
                       zh="还不对：" + "；".join(p.zh for p in problems) + "。")
    return correct(*right)


@exercise("communication", 4, framework="torch",
          prompt=("write recursive_doubling_all_reduce in doubling.py (the cell above), run "
                  "that cell, set written = True, then run this cell again.",
                  "在 doubling.py（上面的单元格）中写好 recursive_doubling_all_reduce，运行那个"
                  "单元格，把 written 设为 True，然后再运行这个单元格。"))
def _comm_4_torch(function: Callable, run: dict) -> Text:
    """The reader's all-reduce against dist.all_reduce on 2 and 4 processes, with the
    chapter's ``matches`` (comm_lab.matches_all_reduce, run on every rank)."""
    from d2l_ext import comm

    (matches,) = _needs(run, "matches")
    problems = []
    for k in (2, 4):
        try:
            agree = comm.spawn(matches, k, function, [1, 5, 1001], timeout=60)
        except RuntimeError as err:  # a rank raised, died or hung: say which, and why
            detail = _first_cause(err)
            problems.append(Text(f"with {k} processes a rank failed or hung ({detail})",
                                 f"{k} 个进程时，有进程出错或卡住（{detail}）"))
            continue
        wrong = [rank for rank, checks in enumerate(agree) if not all(checks)]
        if wrong:
            problems.append(Text(f"with {k} processes, rank(s) {wrong} did not end with "
                                 "dist.all_reduce's sum in x itself",
                                 f"{k} 个进程时，进程 {wrong} 最后在 x 中得到的不是 "
                                 "dist.all_reduce 的和"))
    return _problems_verdict(problems, (
        "with 2 and 4 processes, every rank ended with dist.all_reduce's sum in x.",
        "2 个和 4 个进程时，每个进程最后都在 x 中得到了 dist.all_reduce 的和。"))


@exercise("communication", 3, framework="mxnet",
          prompt=("write allreduce_doubling in the cell above, run it, set written = True, "
                  "then run this cell again.",
                  "在上面的单元格中写好 allreduce_doubling 并运行，把 written 设为 True，然后再"
                  "运行这个单元格。"))
def _comm_3_mxnet(function: Callable, run: dict) -> Text:
    """The reader's doubling over 2 and 4 contexts against the ``device`` kvstore's sum, on
    the chapter's ``integer_data`` (small integers: their sums are exact)."""
    import mxnet as mx
    from mxnet import np, npx

    (integer_data,) = _needs(run, "integer_data")
    problems = []
    for k in (2, 4):
        contexts = [npx.cpu(i) for i in range(k)]
        mx.random.seed(k)
        data = integer_data(1001, contexts)
        expected = [x.copy() for x in data]
        kv = mx.kv.create("device")
        kv.init(0, np.zeros(1001))
        kv.pushpull(0, expected, out=expected)
        try:
            function(data)
            npx.waitall()
        except Exception as err:  # the reader's code: report it, do not stop here
            problems.append(Text(f"with {k} contexts it raised {err!r}",
                                 f"{k} 个上下文时，它抛出了 {err!r}"))
            continue
        wrong = [i for i, (x, y) in enumerate(zip(data, expected)) if not bool((x == y).all())]
        if wrong:
            problems.append(Text(f"with {k} contexts, context(s) {wrong} do not hold the "
                                 "kvstore's sum",
                                 f"{k} 个上下文时，上下文 {wrong} 中的值不是 kvstore 求出的和"))
    return _problems_verdict(problems, (
        "with 2 and 4 contexts, every context holds the kvstore's sum.",
        "2 个和 4 个上下文时，每个上下文中都是 kvstore 求出的和。"))


def _exposed_seconds(k: int, tokens: int = 16 * 16_384, busbw: float = 50e9,
                     gpu_flops: float = 400e12) -> float:
    """The scaling model of communication-scale's exercise 1: the all-reduce's time left
    after the overlappable two thirds of the backward pass (a 0.5e9-parameter model, 1 GB of
    gradients)."""
    compute = 6 * 0.5e9 * tokens / k / gpu_flops
    return max(0.0, 2 * (k - 1) / k * 1e9 / busbw - 4 / 6 * compute)


@exercise("communication-scale", 1, "largest_k", "exposed_ms_64")
def _comm_scale_1(answer: Any, run: dict) -> Text:
    largest_k, exposed_ms_64 = answer
    right_k = max(k for k in (16, 32, 64, 128) if _exposed_seconds(k) == 0)
    right_ms = _exposed_seconds(64) * 1e3
    if equal(largest_k, right_k) and near(exposed_ms_64, right_ms, 0.15):
        return correct(f"doubling the batch doubles each GPU's backward pass, which covers the "
                       f"all-reduce up to {right_k} GPUs; with 64 GPUs {right_ms:.1f} ms stay "
                       f"exposed.",
                       f"批量翻倍后，每块 GPU 的反向传播也长了一倍，GPU 数不超过 {right_k} 块时"
                       f"都能把全归约完全掩盖；64 块 GPU 时仍有 {right_ms:.1f} 毫秒暴露在外。")
    if equal(largest_k, right_k) and near(exposed_ms_64, right_ms / 1e3, 0.15e-3):
        return message(en="Almost: the number of GPUs is right, and the time is in seconds; "
                          "the question asks for milliseconds.",
                       zh="差一点：GPU 数对了，时间也对，但单位是秒；题目问的是毫秒数。")
    if equal(largest_k, right_k):
        return message(en="Half right: the number of GPUs is right; for the milliseconds, "
                          "subtract the overlappable backward pass from the all-reduce.",
                       zh="对了一半：GPU 数对了；算毫秒数时，要从全归约的时间里减去可以与之重叠"
                          "的反向传播时间。")
    return not_quite("each GPU computes 6 N x tokens / k / (400 TFLOP/s), two thirds of it "
                     "overlappable; the ring's all-reduce over the network takes "
                     "2 (k - 1) / k x 1 GB / (50 GB/s).",
                     "每块 GPU 的计算时间是 6N × 词元数 ÷ k ÷ 400 TFLOP/s，其中三分之二可以与通信"
                     "重叠；经网络的环形全归约耗时 2(k - 1)/k × 1 GB ÷ 50 GB/s。")


# ================================================================ memory (its section pages:
# memory-sharding, memory-oom)
@exercise("memory-sharding", 1, "state_gb", "per_process_gb")
def _memory_sharding_1(answer: Any, run: dict) -> Text:
    state_gb, per_process_gb = answer
    if near(state_gb, 24, 0.05 - 1e-12) and near(per_process_gb, 3, 0.05 - 1e-12):
        return correct("16 x 1.5e9 bytes = 24 GB; ZeRO-3 keeps 1/8 of it, 3 GB, per process "
                       "(plus activations and the gathered layers).",
                       "16 × 1.5e9 字节 = 24 GB；ZeRO-3 让每个进程只保留其中的 1/8，即 3 GB"
                       "（另加激活和临时收集的层）。")
    if near(state_gb, 24 * 1e9 / 2**30, 0.05 - 1e-12):
        return close("that is GiB (2³⁰ bytes); the exercise asks for GB (10⁹ bytes).",
                     "这是 GiB（2³⁰ 字节）；题目要的是 GB（10⁹ 字节）。")
    return not_quite("multiply the parameters by 16 bytes; ZeRO-3 divides all of it by the "
                     "number of processes.",
                     "参数个数乘以 16 字节；ZeRO-3 把全部状态除以进程数。")


number_answer("memory", 1, "best_segments", exactly=8,
              why=("s - 1 + 64 / s is 15 at s = 8 (the square root of 64), against 64 "
                   "layers without checkpointing.",
                   "s = 8（64 的平方根）时 s - 1 + 64/s = 15，不做检查点时是 64 层。"),
              hint=("minimise s - 1 + n / s; the two terms balance near the square root of n.",
                    "求 s - 1 + n/s 的最小值；两项在 n 的平方根附近相互平衡。"))


@exercise("memory-sharding", 2, "zero2_gb")
def _memory_sharding_2(zero2_gb: Any, run: dict) -> Text:
    if near(zero2_gb, 2 * 13 + (2 + 12) * 13 / 16, 0.05 - 1e-12):
        return correct("stage 2 keeps the 16-bit weights whole and shards the gradients and "
                       "the optimizer state over the 16 processes.",
                       "第 2 阶段完整保留 16 位权重，把梯度和优化器状态分到 16 个进程上。")
    if near(zero2_gb, 61.75, 0.05 - 1e-12) or near(zero2_gb, 13, 0.05 - 1e-12):
        return not_quite("that is another stage; stage 2 shards the gradients and the "
                         "optimizer state, not the weights.",
                         "这是另一个阶段的结果；第 2 阶段分片的是梯度和优化器状态，不是权重。")
    return not_quite("count 2 bytes of weights per parameter in full, and the other 2 + 12 "
                     "divided by the number of processes.",
                     "每个参数的 2 字节权重全额计入，其余 2 + 12 字节除以进程数。")


@exercise("memory", 2, "factored_bytes")
def _memory_2(factored_bytes: Any, run: dict) -> Text:
    rows, columns = 4096, 11008
    if equal(factored_bytes, (rows + columns) * 4):
        return correct("one float32 number per row and per column, against two per entry for "
                       "Adam.",
                       "每行、每列各一个 float32 数，而 Adam 每个元素要两个。")
    if equal(factored_bytes, (rows + columns) * 4 + 4):
        return close("the exercise leaves out the step counter.", "题目不计步数计数器。")
    if equal(factored_bytes, rows + columns):
        return close("that is numbers, not bytes; each is a float32.",
                     "这是数的个数，不是字节数；每个数是 float32。")
    return not_quite("an m x n matrix has m row means and n column means.",
                     "m × n 的矩阵有 m 个行均值和 n 个列均值。")


@exercise("memory-oom", 1, "sequences_per_gpu")
def _memory_oom_1(sequences_per_gpu: Any, run: dict) -> Text:
    fits = (72 - 16 * 13 / 8) / 6
    if equal(sequences_per_gpu, math.floor(fits)):
        return correct("the state is 16 x 13e9 / 8 bytes per GPU, and the rest holds 7 whole "
                       "sequences.",
                       "每块 GPU 的状态是 16 × 13 × 10⁹ / 8 字节，"
                       "剩下的空间能放下 7 条完整的序列。")
    if equal(sequences_per_gpu, math.ceil(fits)):
        return close("round down; a part of a sequence does not fit.",
                     "要向下取整：不完整的一条序列是放不下的。")
    if near(sequences_per_gpu, fits, 0.05):  # 7.67, or 7.7 as the worked solution rounds
        return close("right so far; now round down to whole sequences.",
                     "算到这里都对；最后还要向下取整，得到完整序列的条数。")
    return not_quite("divide the 16 bytes per parameter by the number of GPUs, subtract from "
                     "the usable memory, and divide by the activations.",
                     "把每个参数的 16 字节除以 GPU 数，从可用显存中减去，再除以每条序列的激活。")


# ---------------------------------------------------------------- transformers

@exercise("transformers", 1, "seq_half")
def _transformers_1(seq_half: Any, run: dict) -> Text:
    d, layers, vocab = 12288, 96, 50257
    if near(seq_half, 6 * d + vocab / (2 * layers), 100):
        return correct("12·L·s·d = 6·(12·L·d² + vocab·d) gives s = 6d + vocab/(2L) ≈ 73,990 "
                       "tokens.",
                       "由 12·L·s·d = 6·(12·L·d² + vocab·d) 得 "
                       "s = 6d + vocab/(2L) ≈ 73,990 个词元。")
    if near(seq_half, 6 * d, 100):
        return close("that is the blocks alone (s = 6d); add the output layer's vocab·d weights.",
                     "这只算了各个块（s = 6d）；还要加上输出层的 vocab·d 个权重。")
    return not_quite("set the attention term 12·L·s·d equal to the weights' 6 FLOPs per weight "
                     "per token (the blocks' 12·L·d² and the output layer's vocab·d), and solve "
                     "for s.",
                     "令注意力项 12·L·s·d 等于权重项（每个权重每个词元 6 次运算；"
                     "块中有 12·L·d² 个权重，输出层有 vocab·d 个），再解出 s。")


number_answer(
    "transformers", 2, "seq_equal",
    ("5·a·s = 34·h gives s = 34·4096 / (5·32) ≈ 870 tokens.",
     "由 5·a·s = 34·h 得 s = 34 × 4096 / (5 × 32) ≈ 870 个词元。"),
    ("divide both terms by s·b and solve 5·a·s = 34·h for s.",
     "两项都除以 s·b，再由 5·a·s = 34·h 解出 s。"),
    within=(34 * 4096 / (5 * 32), 9))


# ---------------------------------------------------------------- transformers-attention

@exercise("transformers-attention", 1, "tiled_bytes")
def _transformers_attention_1(tiled_bytes: Any, run: dict) -> Text:
    s, d, block, item = 8192, 128, 128, 2
    passes = math.ceil(s / block)  # K and V are read once per block of queries
    tiled = item * (2 * s * d + 2 * s * d * passes)
    if near(tiled_bytes, tiled, tiled / 1000):
        return correct("2·(2sd + 2sd·⌈s/B⌉) = 272,629,760 bytes, about 260 MiB: Q and the "
                       "output once, K and V once per block of 128 queries.",
                       "2·(2sd + 2sd·⌈s/B⌉) = 272,629,760 字节，约 260 MiB：Q 和输出各读写"
                       "一次，K 和 V 每个 128 行的查询块各读一次。")
    if near(tiled_bytes, tiled / item, tiled / 1000):
        return close("that counts numbers; bfloat16 takes 2 bytes each.",
                     "这是数的个数；bfloat16 每个数占 2 字节。")
    if near(tiled_bytes, tiled / 2**20 * 1e6, tiled / 200):
        return close("that reads mebibytes as millions: give the exact bytes (1 MiB = 2²⁰ "
                     "bytes).",
                     "这是把 MiB 当成了百万字节：请给出精确的字节数（1 MiB = 2²⁰ 字节）。")
    if near(tiled_bytes, item * (2 * s * d + s * d * passes), tiled / 1000):
        return close("each block of queries reads K and V: count both.",
                     "每个查询块既要读 K，也要读 V：两者都要算上。")
    return not_quite("count the reads of Q and the writes of the output once each, and the "
                     "reads of K and V once per block of queries (⌈s/B⌉ blocks), in bytes.",
                     "Q 的读取和输出的写入各算一次，K 和 V 的读取每个查询块各算一次"
                     "（共 ⌈s/B⌉ 个块），单位是字节。")


number_answer(
    "transformers-attention", 2, "p_five",
    ("p = e⁰ / ℓ = 1 / (e⁻⁴ + e⁻² + e⁻³ + 1) ≈ 0.8310: the running sum already holds every "
     "score's exponential against the final maximum 5.",
     "p = e⁰ / ℓ = 1 / (e⁻⁴ + e⁻² + e⁻³ + 1) ≈ 0.8310：累计和已经包含了每个分数相对最终"
     "最大值 5 的指数。"),
    ("the softmax of a score x is e^(x − m) / ℓ with the final maximum m = 5.",
     "分数 x 的 softmax 值是 e^(x − m) / ℓ，其中 m 是最终的最大值 5。"),
    within=(1 / (math.exp(-4) + math.exp(-2) + math.exp(-3) + 1), 0.0005))


# ---------------------------------------------------------------- transformers-kernels
@exercise("transformers-kernels", 1, "matmul_bytes")
def _transformers_kernels_1(matmul_bytes: Any, run: dict) -> Text:
    n, block, item = 1024, 64, 4
    traffic = item * (2 * n * n * math.ceil(n / block) + n * n)
    if near(matmul_bytes, traffic, traffic / 1000):
        return correct("4·(mk⌈n/b⌉ + kn⌈m/b⌉ + mn) = 138,412,032 bytes, about 132 MiB: A and B "
                       "read 16 times each, C written once; 15.5 FLOPs per byte.",
                       "4·(mk⌈n/b⌉ + kn⌈m/b⌉ + mn) = 138,412,032 字节，约 132 MiB：A 和 B 各读 "
                       "16 遍，C 写一遍；每字节 15.5 次浮点运算。")
    if near(matmul_bytes, traffic - item * n * n, traffic / 1000):
        return close("that is the loads; add the stores of C.",
                     "这只是加载；还要加上写出 C 的字节。")
    if near(matmul_bytes, traffic / item, traffic / 1000):
        return close("that counts numbers; float32 takes 4 bytes each.",
                     "这是数的个数；float32 每个数占 4 字节。")
    return not_quite("each program reads its rows of A and its columns of B in full: A is read "
                     "once per column of blocks (⌈n/b⌉), B once per row of blocks (⌈m/b⌉), "
                     "and C written once, in bytes.",
                     "每个程序都要完整地读入自己那几行 A 和那几列 B：A 按块的列数（⌈n/b⌉）读"
                     "几遍，B 按块的行数（⌈m/b⌉）读几遍，C 写一遍，单位是字节。")


@exercise("transformers-kernels", 2, "composed_bytes", framework="torch")
def _transformers_kernels_2(composed_bytes: Any, run: dict) -> Text:
    r, c = 1024, 4096
    traffic = 32 * r * c + 24 * r
    if near(composed_bytes, traffic, 1):
        return correct("32rc + 24r = 134,242,304 bytes: the matrix read five times and written "
                       "three times, plus the row maxima, their indices and the sums; four times "
                       "the fused kernel's 8rc.",
                       "32rc + 24r = 134,242,304 字节：矩阵读五遍、写三遍，再加上每行的最大值、"
                       "它的下标和行和；是融合核函数 8rc 的四倍。")
    if near(composed_bytes, 32 * r * c + 16 * r, 1):
        return close("max with a dimension also writes an int64 index per row (8 bytes).",
                     "带维度的 max 还要为每行写一个 int64 下标（8 字节）。")
    if near(composed_bytes, 32 * r * c, 16 * r):
        return close("add the per-row numbers: the maxima, their indices and the sums, written "
                     "and read again.",
                     "还要加上每行的那几个数：最大值、它的下标和行和，写出后又被读入。")
    return not_quite("go through the five operations: what each reads and writes, in numbers "
                     "of rc (the matrix) and r (one per row), then times 4 bytes (8 for the "
                     "indices).",
                     "逐个看五个运算各读写多少：以 rc（整个矩阵）和 r（每行一个数）计，再乘以 "
                     "4 字节（下标是 8 字节）。")


@exercise("transformers-kernels", 2, "composed_bytes", framework="mxnet")
def _transformers_kernels_2_mxnet(composed_bytes: Any, run: dict) -> Text:
    r, c = 1024, 4096
    traffic = 32 * r * c + 16 * r
    if near(composed_bytes, traffic, 1):
        return correct("32rc + 16r = 134,234,112 bytes: the matrix read five times and written "
                       "three times, plus the row maxima and the sums, each written once and read "
                       "once; four times the fused kernel's 8rc.",
                       "32rc + 16r = 134,234,112 字节：矩阵读五遍、写三遍，再加上每行的最大值和"
                       "行和，各写一遍、读一遍；是融合核函数 8rc 的四倍。")
    if near(composed_bytes, 32 * r * c + 24 * r, 1):
        return close("that is PyTorch's count: MXNet's max returns the maxima only, no int64 "
                     "indices.",
                     "这是 PyTorch 的算法：MXNet 的 max 只返回最大值，不写 int64 下标。")
    if near(composed_bytes, 32 * r * c, 16 * r):
        return close("add the per-row numbers: the maxima and the sums, written and read again.",
                     "还要加上每行的那几个数：最大值和行和，写出后又被读入。")
    return not_quite("go through the five operations: what each reads and writes, in numbers "
                     "of rc (the matrix) and r (one per row), then times 4 bytes.",
                     "逐个看五个运算各读写多少：以 rc（整个矩阵）和 r（每行一个数）计，再乘以 "
                     "4 字节。")


# ---------------------------------------------------------------- transformers-precision
@exercise("transformers-precision", 1, "smallest_update")
def _transformers_precision_1(smallest_update: Any, run: dict) -> Text:
    if near(smallest_update, 2.0 ** -7, 1e-12):
        return correct("2⁻⁷ = 0.0078125: bfloat16's 7 mantissa bits put the next number above 1 "
                       "at 1 + 2⁻⁷, and 1 + 2⁻⁸ lies exactly halfway, which rounds to the even "
                       "neighbour, 1.",
                       "2⁻⁷ = 0.0078125：bfloat16 有 7 位尾数，1 之上的下一个数是 1 + 2⁻⁷；"
                       "1 + 2⁻⁸ 正好在中点，取偶，舍入回 1。")
    if near(smallest_update, 2.0 ** -7, 1e-4):
        return close("give it exactly: 2⁻⁷ = 0.0078125.", "请给出精确值：2⁻⁷ = 0.0078125。")
    if near(smallest_update, 2.0 ** -8, 1e-12):
        return close("1 + 2⁻⁸ lies exactly halfway between 1 and the next number, and a tie "
                     "rounds to the neighbour whose last bit is 0.",
                     "1 + 2⁻⁸ 正好落在 1 和下一个数的中点，恰在中点时取偶，即末位为 0 的那个邻居。")
    if equal(smallest_update, -7) or equal(smallest_update, -8):
        return close("give the update itself, 2 to that power, not its exponent.",
                     "请给出更新量本身，即 2 的这个次方，而不是指数。")
    if near(smallest_update, 2.0 ** -10, 1e-12) or near(smallest_update, 2.0 ** -11, 1e-12):
        return close("that is float16's step (10 mantissa bits); bfloat16 has 7.",
                     "这是 float16 的间距（10 位尾数）；bfloat16 只有 7 位。")
    return not_quite("count bfloat16's mantissa bits: the step just above 1 is 2 to the minus "
                     "that many, and rounding to nearest needs more than half a step.",
                     "数一数 bfloat16 的尾数位数：1 之上的间距是 2 的负这么多次方；就近舍入时，"
                     "要超过半个间距才会向上舍入。")


@exercise("transformers-precision", 2, "e4m3_scale", "e4m3_power_of_two")
def _transformers_precision_2(answer: Any, run: dict) -> Text:
    scale, power = answer
    exact_ok, power_ok = near(scale, 448 / 3, 0.05), equal(power, 128)
    if exact_ok and power_ok:
        return correct("448 / 3 ≈ 149.3, and 2⁷ = 128, since 3 · 256 = 768 would pass 448.",
                       "448 / 3 ≈ 149.3；2 的幂取 2⁷ = 128，因为 3 · 256 = 768 会超过 448。")
    if exact_ok and equal(power, 256):
        return close("256 rounds the scale up: 3 · 256 = 768 is above E4M3's largest number.",
                     "256 是把缩放因子向上取整：3 · 256 = 768，超过了 E4M3 的最大值。")
    if exact_ok and equal(power, 7):
        return close("give the power of 2 itself, not its exponent: 2⁷ = 128.",
                     "要给出这个 2 的幂本身，而不是指数：2⁷ = 128。")
    if exact_ok:
        return close("the scale is right; now the largest power of 2 not above it.",
                     "缩放因子对了；再找不超过它的最大的 2 的幂。")
    if near(scale, 448 / 3, 0.5):
        return close("448 / 3 = 149.33…: keep the fraction.", "448 / 3 = 149.33…：保留小数部分。")
    if near(scale, 57344 / 3, 1):
        return close("57,344 is E5M2's largest number; E4M3's is 448.",
                     "57,344 是 E5M2 的最大值；E4M3 的是 448。")
    return not_quite("the scale maps the largest magnitude onto E4M3's largest number, 448: "
                     "divide.",
                     "缩放因子把最大的绝对值映射到 E4M3 的最大值 448 上：做一次除法即可。")


# ---------------------------------------------------------------- parallelism
@exercise("parallelism", 1, "sent_per_gpu")
def _parallelism_1(sent_per_gpu: Any, run: dict) -> Text:
    payload = 4 * 1 * 4096 * 8192 * 2  # four all-reduces of b·s·d bfloat16 elements
    sent = payload * 2 * 7 // 8  # a ring sends 2(k − 1)/k of it from each GPU
    if near(sent_per_gpu, sent, 1):
        return correct("four all-reduces (two forward, two backward) of 4,096 · 8,192 elements "
                       "of 2 bytes are handed 268,435,456 bytes, and a ring sends 2(k − 1)/k = "
                       "7/4 of that from each GPU: 469,762,048 bytes (448 MiB).",
                       "四次全归约（前向两次、反向两次），每次 4,096 · 8,192 个 2 字节的元素，"
                       "交给它们的共 268,435,456 字节；按环形算法，每块 GPU 发送的是这个数的 "
                       "2(k − 1)/k = 7/4 倍，即 469,762,048 字节（448 MiB）。")
    if near(sent_per_gpu, 448, 0.5):
        return close("give it in bytes, not MiB.", "请以字节为单位，而不是 MiB。")
    if near(sent_per_gpu, sent, sent * 0.01):
        return close("give it exactly: it is a whole number of bytes.",
                     "请给出精确值：它是整数个字节。")
    if near(sent_per_gpu, payload, 1):
        return close("that is what the all-reduces are handed; a ring sends a multiple of it "
                     "from each GPU that depends on k.",
                     "这是交给全归约的字节数；环形算法从每块 GPU 发送的是它的若干倍，"
                     "倍数取决于 k。")
    if near(sent_per_gpu, sent // 2, 1):
        return close("count the backward pass too (it runs as many all-reduces as the forward "
                     "pass), and use the all-reduce's factor 2(k − 1)/k, not a reduce-scatter's.",
                     "还要算上反向传播（它的全归约次数与前向传播一样多），并且要用全归约的因子 "
                     "2(k − 1)/k，而不是归约散射的因子。")
    if near(sent_per_gpu, 2 * sent, 1) or near(sent_per_gpu, 2 * payload, 1):
        return close("bfloat16 has 2 bytes per element, and a ring sends 2(k − 1)/k of the "
                     "payload, not twice it.",
                     "bfloat16 每个元素 2 字节；环形算法发送的是数据量的 2(k − 1)/k，而不是两倍。")
    return not_quite("count the all-reduces of a block in one step, the elements each is "
                     "handed (b·s·d) and their bytes, then what a ring sends of that payload "
                     "from each process.",
                     "数一数一个块在一步中做几次全归约、每次交给它多少元素（b·s·d）、合多少字节，"
                     "再算出按环形算法每个进程要发送这份数据的几倍。")


@exercise("parallelism", 2, "sequence_share")
def _parallelism_2(sequence_share: Any, run: dict) -> Text:
    extra = 5 * 96 * 2048 / 12288  # 5as/h = 80
    tensor, sequence = 10 + 24 / 8 + extra / 8, (34 + extra) / 8  # 23 and 14.25, times sbh
    if near(sequence_share, sequence / tensor, 0.005):
        return correct("5as/h = 80; tensor parallelism leaves 10 + 24/8 + 80/8 = 23 (times "
                       "sbh), sequence parallelism (34 + 80)/8 = 14.25: a share of about 0.62.",
                       "5as/h = 80；张量并行剩下 10 + 24/8 + 80/8 = 23（乘以 sbh），"
                       "序列并行剩下 (34 + 80)/8 = 14.25：比例约为 0.62。")
    if near(sequence_share, 100 * sequence / tensor, 0.5):
        return close("give it as a fraction, not a percentage.", "请写成小数，而不是百分数。")
    if near(sequence_share, tensor / sequence, 0.01):
        return close("that is the ratio upside down: the sequence-parallel bytes over the "
                     "tensor-parallel ones.",
                     "比例颠倒了：应是序列并行的字节数除以张量并行的字节数。")
    if near(sequence_share, 1 / 8, 0.005):
        return close("that is sequence parallelism against the whole layer; compare it with "
                     "the tensor-parallel layer.",
                     "这是序列并行与完整层之比；要与张量并行的层相比。")
    if near(sequence_share, 1 - sequence / tensor, 0.005):
        return close("that is what sequence parallelism saves; the question asks what it "
                     "leaves.", "这是序列并行省下的部分；题目问的是它剩下的部分。")
    if near(sequence_share, tensor / (34 + extra), 0.005):
        return close("that is tensor parallelism against the whole layer; the question asks "
                     "for sequence parallelism against tensor parallelism.",
                     "这是张量并行与完整层之比；题目问的是序列并行与张量并行之比。")
    return not_quite("compute 5as/h first, then both expressions in units of sbh, and divide "
                     "the sequence-parallel one by the tensor-parallel one.",
                     "先算出 5as/h，再以 sbh 为单位算出两个式子，用序列并行的除以张量并行的。")


# ---------------------------------------------------------------- parallelism-pipeline
@exercise("parallelism-pipeline", 1, "idle_share")
def _parallelism_pipeline_1(idle_share: Any, run: dict) -> Text:
    if near(idle_share, 7 / 39, 0.002):
        return correct("(p − 1)/(m + p − 1) = 7/39 ≈ 0.18: each stage idles about 18% of the "
                       "step, whatever the order of its passes.",
                       "(p − 1)/(m + p − 1) = 7/39 ≈ 0.18：无论各次传播按什么顺序运行，每个阶段"
                       "都有约 18% 的时间空闲。")
    if near(idle_share, 7 / 32, 0.002):
        return close("divide by the whole step, m + p − 1 slots, not by the m slots of work.",
                     "要除以整个一步，即 m + p − 1 个时段，而不是有工作的 m 个时段。")
    if near(idle_share, 32 / 39, 0.002):
        return close("that is the share of the time a stage works; the question asks for the "
                     "idle share.", "这是一个阶段工作的时间比例；题目问的是空闲的比例。")
    if near(idle_share, 100 * 7 / 39, 0.2):
        return close("give it as a fraction, not a percentage.", "请写成小数，而不是百分数。")
    return not_quite("count the slots of one micro-batch's forward and backward pass: a stage "
                     "works in m of them, and the step lasts m + p − 1.",
                     "以一个微批量的前向加反向传播为一个时段：一个阶段在其中 m 个时段里工作，"
                     "而整个一步持续 m + p − 1 个时段。")


@exercise("parallelism-pipeline", 2, "fewest_micro_batches")
def _parallelism_pipeline_2(fewest_micro_batches: Any, run: dict) -> Text:
    if equal(fewest_micro_batches, 133):
        return correct("7/(m + 7) ≤ 0.05 needs m + 7 ≥ 140, so m ≥ 133.",
                       "7/(m + 7) ≤ 0.05 要求 m + 7 ≥ 140，所以 m ≥ 133。")
    if equal(fewest_micro_batches, 140):
        return close("that is m + p − 1, not m.", "这是 m + p − 1，而不是 m。")
    if equal(fewest_micro_batches, 132):
        return close("check the bubble at your answer: it must be at most 5%.",
                     "代入你的答案核对一下气泡：它不能超过 5%。")
    if near(fewest_micro_batches, 133, 1.0) and not equal(fewest_micro_batches,
                                                           round(float(fewest_micro_batches))):
        return close("give a whole number of micro-batches.", "微批量数要是整数。")
    return not_quite("solve (p − 1)/(m + p − 1) ≤ 0.05 for m, with p = 8.",
                     "在 p = 8 时，对 m 解不等式 (p − 1)/(m + p − 1) ≤ 0.05。")


# ---------------------------------------------------------------- parallelism-context-expert
@exercise("parallelism-context-expert", 1, "ring_bytes")
def _parallelism_context_expert_1(ring_bytes: Any, run: dict) -> Text:
    shard = 2 * 8 * (131072 // 16) * 128 * 2  # keys and values of 8,192 tokens, bfloat16
    if near(ring_bytes, 15 * shard, 0.5):
        return correct("a shard is 8,192 tokens; its keys and values are 2 · 8 · 8,192 · 128 "
                       "numbers of 2 bytes, 33,554,432 bytes, sent k − 1 = 15 times: "
                       "503,316,480 bytes (480 MiB).",
                       "每个分片 8,192 个词元；其键和值共 2 · 8 · 8,192 · 128 个 2 字节的数，"
                       "即 33,554,432 字节，发送 k − 1 = 15 次：503,316,480 字节（480 MiB）。")
    if near(ring_bytes, 480, 0.5):
        return close("give it in bytes, not MiB.", "请以字节为单位，而不是 MiB。")
    if near(ring_bytes, 16 * shard, 0.5):
        return close("a process sends its shard k − 1 times, not k: after the last step "
                     "nobody needs it.", "一个进程发送自己的分片 k − 1 次，而不是 k 次："
                     "最后一步之后没有人再需要它。")
    if near(ring_bytes, 4 * 15 * shard, 0.5):
        return close("the ring carries keys and values, which have 8 heads here, not the "
                     "queries' 32.",
                     "环上传递的是键和值，这里它们只有 8 个头，而不是查询的 32 个。")
    if near(ring_bytes, 15 * shard / 2, 0.5) or near(ring_bytes, shard, 0.5):
        return close("count both the keys and the values, at every one of the k − 1 steps.",
                     "键和值都要算上，并且 k − 1 步中的每一步都要算。")
    if near(ring_bytes, 15 * shard, 15 * shard * 0.01):
        return close("give it exactly: it is a whole number of bytes.",
                     "请给出精确值：它是整数个字节。")
    return not_quite("find the tokens each process holds, the numbers in its keys and values "
                     "(heads × head size each), their bytes, and how many times the shard "
                     "is passed on.",
                     "先算出每个进程持有的词元数，再算出其键和值共有多少个数（每个词元的键和值"
                     "各占“头数 × 每头维数”个）、合多少字节，最后看这个分片被传递了几次。")


@exercise("parallelism-context-expert", 2, "last_over_mean")
def _parallelism_context_expert_2(last_over_mean: Any, run: dict) -> Text:
    if near(last_over_mean, 16 / 9, 0.005):
        return correct("process r computes r + 1 blocks: 1 to 8, a mean of 4.5; the last one "
                       "computes 8, 16/9 ≈ 1.78 times the mean.",
                       "进程 r 计算 r + 1 个块：从 1 到 8，平均 4.5；最后一个计算 8 个，"
                       "是平均值的 16/9 ≈ 1.78 倍。")
    if near(last_over_mean, 7.5 / 4, 0.005):
        return close("that counts the diagonal block as half; the question counts every "
                     "computed block whole.",
                     "这是把对角块算作半块的结果；题目要求把每个算过的块都按整块计。")
    if near(last_over_mean, 2, 0.005) or near(last_over_mean, 8, 0.005):
        return close("divide by the mean over the 8 processes, which compute 1, 2, …, 8 "
                     "blocks.", "要除以 8 个进程的平均值，它们分别计算 1、2、…、8 个块。")
    if near(last_over_mean, 1.6, 0.005):
        return close("that is the page's value for 4 processes; the question has 8.",
                     "这是本页 4 个进程时的值；题目是 8 个进程。")
    if near(last_over_mean, 1, 0.005):
        return close("that is the zigzag layout; the question asks about contiguous chunks.",
                     "这是之字形布局的结果；题目问的是连续分块。")
    return not_quite("count the blocks process r computes under a causal mask with contiguous "
                     "chunks, then compare the last process with the mean.",
                     "数一数在因果掩码和连续分块下进程 r 计算几个块，"
                     "再用最后一个进程与平均值相比。")


@exercise("parallelism-context-expert", 3, "dispatch_bytes_per_process")
def _parallelism_context_expert_3(dispatch_bytes_per_process: Any, run: dict) -> Text:
    away = 8192 * 2 * 7 // 8  # rows whose expert is on another process
    answer = (away + away) * 4096 * 2
    if near(dispatch_bytes_per_process, answer, 0.5):
        return correct("16,384 rows, 7/8 of them elsewhere: 14,336 rows go out, as many "
                       "arrive and go back; (14,336 + 14,336) · 4,096 · 2 = 234,881,024 bytes.",
                       "16,384 行中有 7/8 要送往别处：送出 14,336 行，也有同样多的行到达并被送回；"
                       "(14,336 + 14,336) · 4,096 · 2 = 234,881,024 字节。")
    if near(dispatch_bytes_per_process, answer / 2, 0.5):
        return close("count the second all-to-all too: the results of the rows others sent "
                     "here go back.", "还要算上第二次全对全：别的进程送来的行，其结果要送回去。")
    if near(dispatch_bytes_per_process, answer * 8 / 7, 0.5):
        return close("the rows whose expert is on this process do not leave it: 1/8 of them.",
                     "专家就在本进程上的那些行（占 1/8）不离开本进程。")
    if near(dispatch_bytes_per_process, 2 * answer, 0.5):
        return close("that counts the backward pass too; the question asks for one forward "
                     "pass.", "这把反向传播也算进去了；题目问的是一次前向传播。")
    if near(dispatch_bytes_per_process, answer / 2 * (4097 / 4096), 0.5):
        return close("send d numbers per row; the expert of each row need not travel with it "
                     "(the counts per expert are exchanged first).",
                     "每行发送 d 个数即可；每行所属的专家不必随行发送（各专家的行数会先交换）。")
    return not_quite("count the (token, expert) rows, the share of them that go to other "
                     "processes, and what comes back; each row is 4,096 numbers of 2 bytes.",
                     "数一数（词元，专家）行的数目、其中送往其他进程的比例，以及送回的部分；"
                     "每行是 4,096 个 2 字节的数。")


# ---------------------------------------------------------------- parallelism-planner
@exercise("parallelism-planner", 1, "state_bytes_per_gpu")
def _parallelism_planner_1(state_bytes_per_gpu: Any, run: dict) -> Text:
    n = 8_029_995_008
    if near(state_bytes_per_gpu, 16 * n / 8, 0.5):
        return correct("16 bytes per parameter, all three parts sharded over 8 GPUs: "
                       "16 · 8,029,995,008 / 8 = 16,059,990,016 bytes, about 15 GiB.",
                       "每个参数 16 字节，三部分都分片到 8 块 GPU 上："
                       "16 · 8,029,995,008 / 8 = 16,059,990,016 字节，约 15 GiB。")
    if near(state_bytes_per_gpu, 16 * n / 8 / 2**30, 0.06) or near(state_bytes_per_gpu,
                                                                  16 * n / 8 / 1e9, 0.06):
        return close("give it in bytes, not GiB or GB.", "请以字节为单位，而不是 GiB 或 GB。")
    if near(state_bytes_per_gpu, 16 * n, 0.5):
        return close("ZeRO-3 divides all 16 bytes among the 8 GPUs.",
                     "ZeRO-3 把全部 16 字节分到 8 块 GPU 上。")
    if near(state_bytes_per_gpu, (4 + 12 / 8) * n, 0.5) or near(state_bytes_per_gpu,
                                                               (2 + 14 / 8) * n, 0.5):
        return close("that is ZeRO-1 or ZeRO-2; ZeRO-3 shards the 16-bit weights too.",
                     "这是 ZeRO-1 或 ZeRO-2 的结果；ZeRO-3 连 16 位权重也分片。")
    if near(state_bytes_per_gpu, 12 * n / 8, 0.5) or near(state_bytes_per_gpu, 4 * n / 8, 0.5):
        return close("count all three: 2 bytes of weight, 2 of gradient, 12 of optimizer state.",
                     "三部分都要算：权重 2 字节、梯度 2 字节、优化器状态 12 字节。")
    if near(state_bytes_per_gpu, 16 * n / 8, 16 * n / 8 * 0.01):
        return close("give it exactly: it is a whole number of bytes.",
                     "请给出精确值：它是整数个字节。")
    return not_quite("multiply the parameters by the bytes each keeps, then see what ZeRO-3 "
                     "divides among the GPUs.",
                     "用参数个数乘以每个参数占的字节数，再看 ZeRO-3 把哪些部分分到各块 GPU 上。")


@exercise("parallelism-planner", 2, "loss_bytes")
def _parallelism_planner_2(loss_bytes: Any, run: dict) -> Text:
    logits = 8192 * 2 * 128256
    if near(loss_bytes, 12 * logits, 0.5):
        return correct("2 · 8,192 · 128,256 logits, three float32 tensors of them: "
                       "25,216,155,648 bytes, about 23.5 GiB.",
                       "2 · 8,192 · 128,256 个 logits，三个 float32 张量："
                       "25,216,155,648 字节，约 23.5 GiB。")
    if near(loss_bytes, 12 * logits / 2**30, 0.06) or near(loss_bytes, 12 * logits / 1e9, 0.06):
        return close("give it in bytes, not GiB or GB.", "请以字节为单位，而不是 GiB 或 GB。")
    if near(loss_bytes, 4 * logits, 0.5):
        return close("that is what the loss keeps (Korthikanti et al.'s 4 bytes); the planner "
                     "counts the peak, three float32 tensors.",
                     "这是损失保存的部分（Korthikanti 等的 4 字节）；"
                     "规划器计的是峰值时的三个 float32 张量。")
    if near(loss_bytes, 2 * logits, 0.5):
        return close("the planner counts the loss in float32, 4 bytes a number, three tensors.",
                     "规划器按 float32 计损失，每个数 4 字节，共三个张量。")
    if near(loss_bytes, 6 * logits, 0.5):
        return close("half the answer: count both sequences of the micro-batch, and 4 bytes "
                     "(float32) a number.",
                     "只有答案的一半：微批量的两条序列都要算，每个数 4 字节（float32）。")
    return not_quite("count the logits (tokens × vocabulary) and the bytes the planner gives "
                     "each: 12.",
                     "先数 logits 的个数（词元数 × 词表大小），"
                     "再乘以规划器给每个 logit 的字节数：12。")


@exercise("parallelism-planner", 3, "step_over_compute")
def _parallelism_planner_3(step_over_compute: Any, run: dict) -> Text:
    if near(step_over_compute, 39 / 32, 0.002):
        return correct("the idle share is 7/39, so the step is the arithmetic over 32/39: "
                       "39/32 ≈ 1.22 times it.",
                       "空闲比例为 7/39，所以一步是计算时间除以 32/39，即它的 39/32 ≈ 1.22 倍。")
    if near(step_over_compute, 1 + 7 / 39, 0.002) or near(step_over_compute, 7 / 39, 0.002):
        return close("7/39 is the idle share of the step, not a share of the arithmetic.",
                     "7/39 是空闲时间占一步的比例，不是占计算的比例。")
    if near(step_over_compute, 1 + 8 / 32, 0.002):
        return close("the bubble has p − 1 = 7 slots, not 8.",
                     "气泡有 p − 1 = 7 个时隙，不是 8 个。")
    return not_quite("take the idle share (p − 1)/(m + p − 1) and ask what the step is when "
                     "the arithmetic fills the rest of it.",
                     "先算空闲比例 (p − 1)/(m + p − 1)，再想：计算占满其余部分时，一步有多长。")
