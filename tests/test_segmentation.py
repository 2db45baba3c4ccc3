"""d2l_ext.segmentation: chapter 4's four masked cross-entropies agree, value and gradient."""

import re

import pytest

torch = pytest.importorskip("torch")

from d2l_ext import segmentation  # noqa: E402
from d2l_ext.segmentation import VARIANTS, MaskedCrossEntropy  # noqa: E402


def reference(pred, target, ignore_value=-1, num_classes=10):
    """The loss written out plainly, pixel by pixel, in float64."""
    target = target.clone()
    target[target == num_classes - 1] = ignore_value
    keep = (target != ignore_value).flatten()
    scores = pred.permute(0, 2, 3, 1).reshape(-1, num_classes).double()[keep]
    labels = target.flatten()[keep]
    loss = -(scores.log_softmax(1).gather(1, labels[:, None])).mean()
    return 0.0 * loss if len(set(target.flatten().tolist())) < 2 else loss


def value_and_grad(variant, pred, target, **kwargs):
    pred = pred.clone().requires_grad_()
    loss = MaskedCrossEntropy(variant, **kwargs)(pred, target)
    loss.backward()
    return loss.detach(), pred.grad


def batches():
    pred = torch.randn(2, 10, 6, 6, generator=torch.Generator().manual_seed(1))
    _, labels = segmentation.random_batch(2, size=6, seed=3)
    yield "random labels", pred, labels
    yield "one class and background", pred, torch.where(labels > 4, 9, 2)  # {2}: skipped
    yield "one class and ignored", pred, torch.where(labels > 4, -1, 2)  # {-1, 2}: counted
    yield "only background", pred, torch.full_like(labels, 9)  # nothing left: NaN
    yield "two classes", pred, torch.where(labels > 4, 7, 3)


@pytest.mark.parametrize("case, pred, target", list(batches()), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_every_variant_gives_the_same_loss_and_gradient(case, pred, target):
    expected = reference(pred, target)
    original = value_and_grad("original", pred, target)
    for variant in VARIANTS:
        value, grad = value_and_grad(variant, pred, target)
        torch.testing.assert_close(value.double(), expected, equal_nan=True,
                                   msg=f"{variant}: {case}")
        torch.testing.assert_close(grad, original[1], equal_nan=True, msg=f"{variant}: {case}")


def test_fewer_than_two_labels_zero_the_loss_and_the_gradient():
    pred = torch.randn(1, 10, 4, 4)
    target = torch.full((1, 4, 4), 5)  # one label: no update
    for variant in VARIANTS:
        value, grad = value_and_grad(variant, pred, target)
        assert value.item() == 0.0 and grad.abs().max().item() == 0.0, variant
    target[0, 0, 0] = 9  # background becomes the ignore value, which counts as a label
    for variant in VARIANTS:
        assert value_and_grad(variant, pred, target)[0].item() > 0, variant


def test_the_original_leaves_the_callers_labels_alone():
    _, labels = segmentation.random_batch(1, size=8)
    before = labels.clone()
    MaskedCrossEntropy("original")(torch.randn(1, 10, 8, 8), labels)
    assert torch.equal(labels, before)


def test_random_batch_is_fixed_and_uses_every_label():
    images, labels = segmentation.random_batch(2, size=16, seed=5)
    again = segmentation.random_batch(2, size=16, seed=5)
    assert torch.equal(images, again[0]) and torch.equal(labels, again[1])
    assert images.shape == (2, 3, 16, 16) and labels.shape == (2, 16, 16)
    assert set(labels.unique().tolist()) == set(range(-1, 10))


def test_the_net_scores_every_pixel():
    net = segmentation.SegmentationNet(num_hidden=2)
    assert net(torch.zeros(2, 3, 12, 12)).shape == (2, 10, 12, 12)
    assert len([m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]) == 4


def test_an_unknown_variant_names_the_choices():
    with pytest.raises(ValueError, match="original, where, sort, ignore_index"):
        MaskedCrossEntropy("fast")


ORDER = {  # the syncing operators of a training step, in the order chapter 4's losses run them
    "original": ["nonzero", "index_put_", "_unique2", "nonzero", "nonzero", "nonzero"],
    "where": ["_unique2", "nonzero", "nonzero", "nonzero"],
    "sort": ["nonzero", "nonzero", "nonzero"],
    "ignore_index": [],
}


def _cpu_ops(f):
    """The host operators ``f()`` runs, in a CPU profile: (name, start, end), by start."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        f()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.end) for e in events]


VIEWS = ("aten::slice", "aten::select", "aten::as_strided", "aten::alias", "aten::view",
         "aten::unsqueeze", "aten::expand", "aten::detach", "aten::detach_", "detach",
         "detach_")  # what chapter 4's sync_points passes over between lift_fresh and index_put_


def _waits_on_a_gpu(ops):
    """The operators among ``ops`` that wait for a CUDA device, outermost only: a size read
    back (nonzero, unique), and an index assignment of a number held in a fresh host tensor
    (index_put_ right after the lift_fresh that made it, views of the target passed over)
    that did not become a masked_fill_; on a GPU the number is copied to the device with a
    copy that waits. The rule of chapter 4's sync_points, for a CPU profile's events."""
    found, filled = [], []
    for i, (name, start, end) in enumerate(ops):
        if any(s <= start and end <= e for _, s, e in found + filled):
            continue
        if name in ("aten::nonzero", "aten::_unique2"):
            found.append(ops[i])
        elif name == "aten::index_put_":
            before = sorted((op for op in ops if op[2] <= start), key=lambda op: op[2])
            while before and before[-1][0] in VIEWS:
                before.pop()
            if before and before[-1][0] == "aten::lift_fresh":
                masked = any(n == "aten::masked_fill_" and start <= s and e <= end
                             for n, s, e in ops)
                (filled if masked else found).append(ops[i])
    return [name.removeprefix("aten::") for name, _, _ in found]


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_synchronises_as_often_and_in_the_order_documented(variant):
    """A training step's operators that wait for the device on a GPU (nonzero, also inside
    boolean indexing and its backward; unique; the index assignment of a Python number), in a
    CPU profile: the host runs the same operators on a GPU. The order is the page's (unique
    before the boolean masks), so that the first wait of a step moves as chapter 4 says."""
    pred = torch.randn(2, 10, 8, 8, requires_grad=True)
    _, labels = segmentation.random_batch(2, size=8, seed=4)
    loss_fn = MaskedCrossEntropy(variant)
    names = _waits_on_a_gpu(_cpu_ops(lambda: loss_fn(pred, labels).backward()))
    assert names == ORDER[variant]
    row = re.search(rf'^``"{variant}"``.* (\d+)$', segmentation.__doc__, re.M)
    assert row and int(row.group(1)) == len(ORDER[variant]), "the module's table says otherwise"


def test_a_number_assigned_through_integer_indices_is_copied_a_mask_fills():
    """What the sixth synchronisation of the original loss rests on, as far as a CPU build
    shows it: Python's __setitem__ wraps a number in a host tensor (aten::lift_fresh) and calls
    index_put_, which with one boolean mask turns into masked_fill_ (the number read on the
    host: no copy to the device) and with integer indices does not (on a CUDA tensor it then
    copies the number to the device). A 0-dim tensor value is not wrapped."""
    import operator

    t = torch.arange(12.0)
    mask, idx = t > 5, torch.nonzero(t > 5, as_tuple=True)
    masked = [n for n, _, _ in _cpu_ops(lambda: operator.setitem(t, mask, -1.0))]
    indexed = [n for n, _, _ in _cpu_ops(lambda: operator.setitem(t, idx, -1.0))]
    assert masked[:2] == indexed[:2] == ["aten::lift_fresh", "aten::index_put_"]
    assert "aten::masked_fill_" in masked and "aten::masked_fill_" not in indexed
    assert _waits_on_a_gpu(_cpu_ops(lambda: operator.setitem(t, mask, -1.0))) == []
    assert _waits_on_a_gpu(_cpu_ops(lambda: operator.setitem(t, idx, -1.0))) == ["index_put_"]
    value = torch.tensor(-1.0)
    assert "aten::lift_fresh" not in [n for n, _, _ in _cpu_ops(
        lambda: operator.setitem(t, idx, value))]
    assert torch.equal(t, torch.where(torch.arange(12.0) > 5, -1.0, torch.arange(12.0)))


def test_an_assignment_through_a_view_or_of_a_fresh_host_tensor_is_found():
    """On a CUDA device each of these copies a one-element CPU tensor to the device inside
    index_put_ and waits; in a CPU profile a view of the target (slice, select) or a detach_
    (torch.tensor(...)) comes between the lift_fresh and the index_put_, and the rule passes
    over it. A value made before the profile is not seen (the page states that limit)."""
    import operator

    t, t2 = torch.arange(12.0), torch.zeros(4, 12)
    i1 = torch.nonzero(t > 5, as_tuple=True)[0]
    for f in (lambda: operator.setitem(t2, (slice(1, None), i1), -1.0),
              lambda: operator.setitem(t2, (0, i1), -1.0),
              lambda: operator.setitem(t, (i1,), torch.tensor(-1.0)),
              lambda: t.index_put_((i1,), torch.tensor(-1.0))):
        assert _waits_on_a_gpu(_cpu_ops(f)) == ["index_put_"]
    value = torch.tensor(-1.0)
    assert _waits_on_a_gpu(_cpu_ops(lambda: operator.setitem(t, (i1,), value))) == []
    assert _waits_on_a_gpu(_cpu_ops(lambda: operator.setitem(t2, (0, t2[0] > 5), -1.0))) == []


def test_the_headers_say_what_the_page_says_of_the_cuda_copy_and_the_mask_shortcut():
    """The installed PyTorch's headers: memcpy_and_sync (the blocking copy of nonzero, unique,
    .item() and of index_put_'s number) announces a synchronisation and waits in
    cudaStreamSynchronize; index_put_ takes the masked_fill_ shortcut only for a one-element
    value on the CPU and boolean (or byte) indices on the tensor's device."""
    from pathlib import Path

    include = Path(torch.__file__).parent / "include"
    cuda = include / "c10" / "cuda" / "CUDAFunctions.h"
    utils = include / "ATen" / "native" / "TensorAdvancedIndexingUtils.h"
    if not (cuda.exists() and utils.exists()):
        pytest.skip("this PyTorch ships no C++ headers")
    text = cuda.read_text()
    body = text[text.index("memcpy_and_sync("):text.index("stream_synchronize(")]
    assert "warn_or_error_on_sync()" in body and "cudaStreamSynchronize(stream)" in body
    text = utils.read_text()
    body = text[text.index("canDispatchToMaskedFill("):]
    assert "value.numel() == 1 && value.device().is_cpu()" in body
    assert "kByte" in body and "kBool" in body and "index.device() != self_device" in body


def _local_scalar_reads(f):
    """How many times ``f()`` reads a value to the host (aten::_local_scalar_dense, the op
    behind .item(), which waits for the device on a GPU), in a CPU profile."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        f()
    return sum(e.name == "aten::_local_scalar_dense" for e in prof.events())


def test_repeat_interleave_reads_twice_unless_told_its_output_size():
    """Chapter 4 says repeat_interleave synchronises twice (the output size, the check for
    negative repeats) and that output_size= skips both: a PyTorch that changed either would
    make the page's table and prose disagree."""
    x, repeats = torch.randn(10), torch.tensor([i % 3 for i in range(10)])
    total = int(repeats.sum())
    assert _local_scalar_reads(lambda: x.repeat_interleave(repeats)) == 2
    assert _local_scalar_reads(lambda: x.repeat_interleave(repeats, output_size=total)) == 0
    with pytest.raises(RuntimeError, match="negative"):
        x.repeat_interleave(-repeats - 1)


def test_the_a100_traces_hold_what_chapter_4_says_of_them():
    """The chapter's section on real GPU traces (recorded by others, shipped with the book)
    says: .item() in event_sync_a100 is a copy into pageable memory then a stream
    synchronisation, both inside aten::_local_scalar_dense; alexnet_a100_sync copies each of
    AlexNet's 16 parameters with the same pair of calls inside aten::copy_, from pageable
    memory to the device; and every synchronisation followed by GPU work left the GPU idle."""
    from d2l_ext import gputrace

    events = gputrace.load("event_sync_a100")
    copy, sync = gputrace.syncs(events)[:2]
    assert (copy.call.name, sync.call.name) == ("cudaMemcpyAsync", "cudaStreamSynchronize")
    assert copy.device_event.name == "Memcpy DtoH (Device -> Pageable)"
    around = {e.name for e in events if e.kind == "op" and e.start_us <= copy.call.start_us
              and sync.call.end_us <= e.end_us}
    assert {"aten::item", "aten::_local_scalar_dense"} <= around
    assert copy.wait_us > sync.wait_us  # the pageable copy waited; the sync found it empty

    alexnet = gputrace.load("alexnet_a100_sync")
    streams = [s for s in gputrace.syncs(alexnet) if s.call.name == "cudaStreamSynchronize"]
    assert len(streams) == 16  # 8 layers, a weight and a bias each
    calls = [e for e in alexnet if e.kind == "runtime" and not e.on_device]
    copies = {link.call.start_us: link.work.name
              for link in gputrace.launches(alexnet, kinds=("memcpy",))}
    for s in streams:
        before = max((e for e in calls if e.end_us <= s.call.start_us), key=lambda e: e.end_us)
        assert before.name == "cudaMemcpyAsync"
        assert copies[before.start_us] == "Memcpy HtoD (Pageable -> Device)"
        assert any(e.name == "aten::copy_" and e.start_us <= before.start_us
                   and s.call.end_us <= e.end_us for e in alexnet if e.kind == "op")
    idle = [s.idle_after_us for s in gputrace.syncs(events) + gputrace.syncs(alexnet)
            if s.idle_after_us is not None]
    assert len(idle) == 21 and min(idle) > 0


def test_an_mxnet_wait_sleeps_so_thread_time_leaves_it_out():
    """Chapter 4 (MXNet) reads the Python thread's CPU time as its work alone: a wait for the
    engine must sleep, not spin, for that to hold."""
    import time

    mx = pytest.importorskip("mxnet")
    a = mx.nd.ones((500, 500))
    for _ in range(3):  # warm up
        mx.nd.dot(a, a).wait_to_read()
    mx.nd.waitall()
    wall, cpu = time.perf_counter(), time.thread_time()
    b = a
    for _ in range(6):  # few operators, each long: the thread queues them in microseconds
        b = mx.nd.dot(b, a) / 500
    mx.nd.waitall()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert cpu < 0.5 * wall, (cpu, wall)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_chapters_a100_cell_tables_every_sync_and_names_its_source(lang, monkeypatch):
    """The shared cell of chapter 4 that reads the real A100 traces, run as either kernel
    runs it: a row for each of the 25 synchronisations, the source and licence of each trace
    printed and in the figure, and the values the prose cites."""
    import contextlib
    import io
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    pytest.importorskip("yaml", reason="the book tools need the full environment")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from d2l_ext import gputrace, i18n, trace
    from d2l_ext.utils import text_table

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from pipeline import config, sources

    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)
    chapter = sources.parse(config.CHAPTERS / "en" / "host-device-sync.md")
    cell = [c.source for c in chapter.cells
            if c.kind == "code" and c.framework is None and "gputrace." in c.source]
    assert len(cell) == 1
    names = {"gputrace": gputrace, "trace": trace, "plt": plt, "text_table": text_table,
             "d2l": SimpleNamespace(message=i18n.message, label=i18n.label)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell[0].replace("plt.show()", ""), names)
    titles = " ".join(ax.get_title() for ax in plt.gcf().axes)
    plt.close("all")
    printed = out.getvalue()
    assert len(names["sync_rows"]) == 25
    for name in names["A100_VIEWS"]:
        _, gpu, source, licence = gputrace.SHIPPED[name]
        assert source in printed and licence in printed and gpu in titles and source in titles
        if lang == "en":
            assert f"Source: {gputrace.provenance(name)}." in printed
    if lang == "zh":
        from test_zh import english_runs

        assert english_runs(printed) == [] and "来源：" in printed and "许可证" in printed
    assert (names["item_copy"].wait_us, names["item_sync"].wait_us) == (29, 6)
    assert names["item_sync"].idle_after_us == 84 and len(names["stream_waits"]) == 16
    assert (min(names["stream_waits"]), max(names["stream_waits"])) == (9, 95)
    assert len(names["device_syncs"]) == 5 and names["longest_wait"] == 884
    assert (min(names["idle_after"]), round(max(names["idle_after"]) / 1000)) == (63, 807)
