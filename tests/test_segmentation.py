"""d2l_ext.segmentation: the host-device-sync chapter's four masked cross-entropies agree, value
and gradient."""

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


# the syncing operators of a training step, in the order the host-device-sync chapter's
# losses run them
ORDER = {
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


# what the host-device-sync chapter's sync_points passes over between lift_fresh and index_put_
VIEWS = ("aten::slice", "aten::select", "aten::as_strided", "aten::alias", "aten::view",
         "aten::unsqueeze", "aten::expand", "aten::detach", "aten::detach_", "detach",
         "detach_")


def _waits_on_a_gpu(ops):
    """The operators among ``ops`` that wait for a CUDA device, outermost only: a size read
    back (nonzero, unique), and an assignment of a number held in a fresh host tensor (an
    index_put_, a copy_ outside any other operator, or a fill_, right after the lift_fresh
    that made the tensor, views of the target passed over) that did not become a masked_fill_
    and is no fill_ (those read the number on the host); on a GPU the number is copied to the
    device with a copy that waits. The rule of the host-device-sync chapter's sync_points, for a
    CPU profile's
    events."""
    found, filled = [], []
    for i, (name, start, end) in enumerate(ops):
        if any(s <= start and end <= e for _, s, e in found + filled):
            continue
        if name in ("aten::nonzero", "aten::_unique2"):
            found.append(ops[i])
        elif name in ("aten::index_put_", "aten::copy_", "aten::fill_"):
            if name == "aten::copy_" and any(j != i and s <= start and end <= e
                                             for j, (_, s, e) in enumerate(ops)):
                continue
            before = sorted((op for op in ops if op[2] <= start), key=lambda op: op[2])
            while before and before[-1][0] in VIEWS:
                before.pop()
            if before and before[-1][0] == "aten::lift_fresh":
                reads = name == "aten::fill_" or any(
                    n == "aten::masked_fill_" and start <= s and e <= end for n, s, e in ops)
                (filled if reads else found).append(ops[i])
    return [name.removeprefix("aten::") for name, _, _ in found]


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_synchronises_as_often_and_in_the_order_documented(variant):
    """A training step's operators that wait for the device on a GPU (nonzero, also inside
    boolean indexing and its backward; unique; the index assignment of a Python number), in a
    CPU profile: the host runs the same operators on a GPU. The order is the page's (unique
    before the boolean masks), so that the first wait of a step moves as the host-device-sync
    chapter says."""
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
    """The host-device-sync chapter says repeat_interleave synchronises twice (the output size, the
    check for
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
    """The host-device-sync chapter (MXNet) reads the Python thread's CPU time as its work alone: a
    wait for the
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
    """The shared cell of the host-device-sync chapter that reads the real A100 traces, run as
    either kernel
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

    from d2l_ext import catalogue, gputrace, i18n, sync_profile, trace
    from d2l_ext.utils import show, text_table

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from pipeline import config, sources

    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)
    chapter = sources.parse(config.CHAPTERS / "en" / "host-device-sync.md")
    cell = [c.source + "\n" + chapter.cells[i + 1].source  # the traces read
            + "\n" + chapter.cells[i + 2].source  # their table, sources and figure
            for i, c in enumerate(chapter.cells)
            if c.kind == "code" and c.framework is None and "A100_ROWS = {" in c.source]
    assert len(cell) == 1
    names = {"gputrace": gputrace, "trace": trace, "sync_profile": sync_profile, "plt": plt,
             "text_table": text_table,
             "d2l": SimpleNamespace(message=i18n.message, label=i18n.label, say=catalogue.say,
                                    figure_text=catalogue.figure_text, show=show)}
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


MEASURING = "host-device-sync-measuring"  # the chapter's section page


def _page_code(framework, start, end=None, page="host-device-sync"):
    """The source of the host-device-sync chapter's (English) code cell of `framework` (None:
    shared) on `page` that has a line starting with `start`, with its collapsed presentation,
    from that line to the line before `end` (default: the end)."""
    import sys
    from pathlib import Path

    from page_cells import cell_with_presentation

    pytest.importorskip("yaml", reason="the book tools need the full environment")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from pipeline import config, sources

    chapter = sources.parse(config.CHAPTERS / "en" / f"{page}.md")
    code = cell_with_presentation(chapter.cells, start, framework)
    found = re.search(rf"^{re.escape(start)}", code, re.M)
    assert found, f"no line of the {framework} cell with {start!r} starts with it"
    code = code[found.start():]
    return code if end is None else code[:code.index(end)]


def _page_names(**names):
    """A namespace for the host-device-sync chapter's cells: d2l's pieces they use, and `names`."""
    import math
    import statistics
    from types import SimpleNamespace

    from d2l_ext import catalogue, gpu_runs, i18n, sync_profile
    from d2l_ext.utils import Timing, false_alarm, paired_verdict, show, text_table

    d2l = SimpleNamespace(message=i18n.message, label=i18n.label, gpu_runs=gpu_runs,
                          Timing=Timing, paired_verdict=paired_verdict, false_alarm=false_alarm,
                          say=catalogue.say, figure_text=catalogue.figure_text, show=show,
                          listing=catalogue.listing)
    base = {"d2l": d2l, "math": math, "statistics": statistics, "text_table": text_table,
            "sync_profile": sync_profile,
            "mean": statistics.fmean, "median": statistics.median,
            "LOSS": i18n.message(en="loss", zh="损失函数"),
            "ms": lambda timing: timing.text("ms"),
            "signed": lambda r: f"{r:+.0%}".replace("-", "\u2212"),
            "per_round": lambda a, b: [x / y for x, y in zip(a.times, b.times)],
            "span": lambda r: f"{min(r):.2f}–{max(r):.2f}"}
    return base | names


@pytest.fixture
def _no_capture(monkeypatch):
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.delenv("D2L_CODE_VERSION", raising=False)


def test_the_pages_sync_points_find_the_assignments_that_copy_in_a_cpu_trace(tmp_path):
    """The host-device-sync chapter's sync_points (d2l_ext.sync_profile), run on a real CPU
    profile: an assignment of a
    Python number (or
    of a fresh torch.tensor) to one element is a copy_ of its own, which on a CUDA device is a
    blocking copy from the host (ATen's copy_to); through integer indices it is index_put_; to
    a slice or a row it is fill_, which reads the number on the host, and so is nothing; so is
    a boolean mask (masked_fill_), fill_ with a number, and a copy_ of a tensor that was not
    made fresh on the host."""
    import operator

    from torch.profiler import ProfilerActivity, profile, record_function

    from d2l_ext import sync_profile, trace

    names = {"sync_points": sync_profile.sync_points}
    x = torch.randn(100)
    z, z2, w = x.clone(), torch.randn(8, 8), torch.randn(100)
    mask, idx = x > 0, torch.nonzero(x > 0, as_tuple=True)
    cases = {
        "z[3] = 0.0": (lambda: operator.setitem(z, 3, 0.0), ["copy_"]),
        "z2[1, 2] = 0.0": (lambda: operator.setitem(z2, (1, 2), 0.0), ["copy_"]),
        "z[3] = torch.tensor(0.0)": (lambda: operator.setitem(z, 3, torch.tensor(0.0)),
                                     ["copy_"]),
        "z[idx] = 0.0": (lambda: operator.setitem(z, idx, 0.0), ["index_put_"]),
        "z[mask] = 0.0": (lambda: operator.setitem(z, mask, 0.0), []),
        "z[1:4] = 0.0": (lambda: operator.setitem(z, slice(1, 4), 0.0), []),
        "z2[1] = 0.0": (lambda: operator.setitem(z2, 1, 0.0), []),
        "z[3].fill_(0.0)": (lambda: z[3].fill_(0.0), []),
        "z.copy_(w)": (lambda: z.copy_(w), []),
        "w.to(torch.float64)": (lambda: w.to(torch.float64), []),
    }
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for name, (f, _) in cases.items():
            with record_function(name):
                f()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = trace.load_trace(str(path))
    spans = {e.name: e for e in events if e.category == "user_annotation" and e.name in cases}
    found = {name: [e.name.removeprefix("aten::") for e in names["sync_points"](events)
                    if s.start_us <= e.start_us < s.end_us] for name, s in spans.items()}
    assert found == {name: want for name, (_, want) in cases.items()}


def test_the_pages_headers_say_an_element_is_copied_and_a_slice_filled():
    """What the page says of t[i] = v and t[a:b] = v, in the installed PyTorch's headers:
    copy_to copies a value of the element's size with copy_ (a blocking copy from the host on
    CUDA) and fills a larger target from a 0-dim host tensor with fill_."""
    from pathlib import Path

    header = Path(torch.__file__).parent / "include" / "ATen" / "TensorIndexing.h"
    if not header.exists():
        pytest.skip("this PyTorch ships no C++ headers")
    text = header.read_text()
    body = text[text.index("inline void copy_to("):]
    body = body[:body.index("\n}\n")]
    assert body.index("dst.copy_(src);") < body.index("dst.fill_(src);")
    assert "src.dim() == 0 && src.device().type() == at::kCPU" in body


def test_the_pages_profiles_leave_a_disturbed_one_out():
    """calm_profiles keeps a version's profiles whose profiled step is at most 25% longer than
    in its fastest profile; merged then reads the rest."""
    from d2l_ext import sync_profile

    names = {"calm_profiles": sync_profile.calm_profiles, "merged": sync_profile.merged}
    profiles = [{"profiled": [4.0], "host": [3.9]}, {"profiled": [4.9], "host": [4.8]},
                {"profiled": [5.2], "host": [30.0]}]
    calm = names["calm_profiles"](profiles)
    assert calm == profiles[:2]
    assert names["merged"](calm)["host"] == [3.9, 4.8]


def test_the_pages_model_cell_on_a_device_whose_profiler_records_no_device_work(_no_capture,
                                                                               capsys):
    """On MPS (or XPU) the device queues work, but no ProfilerActivity records it (or its
    waits): the columns, the model and its direction are not read, and the key figures'
    table names the device."""
    from test_book import _sync_page_gpu_state

    names = _sync_page_gpu_state(False)
    names["costs"]["original"]["syncs"] = 5
    for name, c in names["costs"].items():
        c["profiled"] = [names["profiled"][name]]
    names |= _page_names(device=torch.device("mps"), device_name="mps", queues=True,
                         traced=False, fixed=["where", "sort", "ignore_index"],
                         first=names["timings"]["original"],
                         calm={name: [c] for name, c in names["costs"].items()})
    exec(_page_code("torch", "FIGURES = {"), names)
    for start in ("FIGURES = {", "def idle_ms(name):", "def figure(key, value"):
        exec(_page_code("torch", start, page=MEASURING), names)
    exec(_page_code(None, "def predicted_ms", page=MEASURING), names)
    printed = capsys.readouterr().out
    assert "queues its work, but its profiler recorded neither" in names["columns_note"].en
    assert "made no such calls" in names["count_check"].en
    assert "this run (MPS)" in printed and "this run (CPU)" not in printed
    assert "the model cannot be tested here" in names["model_verdict"].en
    assert "无法检验模型" in names["model_verdict"].zh
    assert names["direction_verdict"].en == "there is nothing to test either"
    assert "original/where: the model expects" not in printed


def test_the_pages_direction_counts_only_clear_differences(_no_capture, capsys):
    """On a traced GPU run a fix's direction counts only where the timings differ in every
    round and the model's predictions from the separate profiles do not overlap: sort
    (model faster, timings slower in every round) disagrees; where (model within its spread)
    is not counted; ignore_index agrees."""
    from test_book import _sync_page_gpu_state

    from d2l_ext.utils import Timing

    def profile(prediction):
        return {"host": [0.0], "host_B": [0.0], "device": [prediction], "device_B": [0.0],
                "B": [0.0]}

    names = _sync_page_gpu_state(True)
    for name, c in names["costs"].items():
        c["profiled"] = [names["profiled"][name]]
    rounds = {"original": [29.6, 29.7, 29.65, 29.8, 29.5],
              "where": [29.3, 29.9, 29.4, 29.5, 29.6],
              "sort": [29.9, 30.0, 29.95, 30.1, 29.8],
              "ignore_index": [25.1, 25.2, 25.15, 25.3, 25.0]}
    timings = {name: Timing(tuple(t / 1e3 for t in ts)) for name, ts in rounds.items()}
    calm = {"original": [29.3, 29.46, 29.6], "where": [29.0, 29.5, 29.9],
            "sort": [28.8, 28.9, 29.0], "ignore_index": [25.0, 25.03, 25.1]}
    names |= _page_names(timings=timings, first=timings["original"],
                         fixed=["where", "sort", "ignore_index"],
                         calm={name: [profile(p) for p in ps] for name, ps in calm.items()},
                         chance=2 * 0.5 ** 5)  # the page's false-alarm chance, 5 rounds
    exec(_page_code(None, "def predicted_ms", page=MEASURING), names)
    printed = capsys.readouterr().out
    assert names["compared"] == ["sort", "ignore_index"] and names["disagree"] == ["sort"]
    said = names["direction_verdict"].en
    assert said.startswith("the model predicted the sort loss faster than the original")
    assert "but the timings found it slower in every round" in said
    assert "here the model is wrong, so trust the timings" in said
    assert "the model predicted the ignore_index loss faster" in said and "and the timings" in said
    assert "where" not in said.replace("the original", "")  # within its spread: not said
    assert "(its predictions from the two versions' profiles overlap)" in printed  # where
    assert "sort slower in every round); they disagree on which is faster (" in printed
    assert "by chance with a probability of 6%" in printed  # the false-alarm chance, stated
    assert "ignore_index faster in every round)." in printed


@pytest.mark.parametrize("case", ["every round", "mixed", "slower"])
def test_the_pages_fix_verdict_goes_by_rounds(case, monkeypatch):
    """fix_verdict is the paired verdict on the per-round ratios, with its false-alarm chance;
    ranges that overlap do not make it "nothing measurable" when every round agrees."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from d2l_ext import i18n
    from d2l_ext.utils import Timing

    monkeypatch.setattr(i18n, "cjk_font", lambda: None)
    original = [3.95, 3.70, 3.90, 3.84, 3.86]  # overlapping ranges, yet faster every round
    final = {"every round": [3.70, 3.62, 3.72, 3.61, 3.65],
             "mixed": [3.70, 3.85, 3.72, 3.61, 3.65],
             "slower": [4.00, 3.90, 3.95, 3.90, 3.92]}[case]
    timings = {"original": Timing(tuple(t / 1e3 for t in original)),
               "ignore_index": Timing(tuple(t / 1e3 for t in final))}
    names = _page_names(timings=timings, final="ignore_index", plt=plt)
    code = _page_code(None, "def ms(timing)", page=MEASURING)
    exec(code.replace("plt.show()", "plt.close('all')"), names)
    verdict = names["fix_verdict"]
    if case == "every round":
        assert not timings["ignore_index"].clearly_faster(timings["original"])
        assert "faster than the original in every one of the 5 rounds" in verdict.en
        assert "probability of 6%" in verdict.en and "全部 5 遍" in verdict.zh
    elif case == "mixed":
        assert "in 4 of the 5 rounds" in verdict.en and "cannot tell the two apart" in verdict.en
        assert "分不出两者的快慢" in verdict.zh
    else:
        assert "slower than the original in every one of the 5 rounds" in verdict.en


@pytest.mark.parametrize("queues, often", [
    (False, [3.73, 3.70, 3.75, 3.72, 3.74]),  # a CPU: .item() waits for nothing
    (True, [4.90, 4.85, 4.95, 4.88, 4.92]),  # slower in every round
    (True, [4.60, 4.85, 4.70, 4.50, 4.92])])  # not in every round
def test_the_pages_logging_verdict(queues, often, capsys):
    """The logging verdict goes by rounds too, and on a device that queues nothing says that
    the comparison cannot test the model; the cell does not print what the prose quotes."""
    from d2l_ext import i18n
    from d2l_ext.utils import Timing

    rarely = [3.70, 4.65, 3.72, 4.60, 3.71] if queues else [3.72, 3.71, 3.74, 3.70, 3.73]
    log_timings = {1: Timing(tuple(t / 1e3 for t in often)),
                   4: Timing(tuple(t / 1e3 for t in rarely))}
    names = _page_names(runs={1: None, 4: None}, log_syncs={1: 4, 4: 1}, log_steps=4,
                        log_timings=log_timings, queues=queues, final="ignore_index",
                        timings={"ignore_index": log_timings[4]},
                        SYNC=i18n.message(en="sync", zh="同步"),
                        SYNCS=i18n.message(en="syncs", zh="同步"))
    exec(_page_code(None, "for n in runs:", page=MEASURING), names)
    verdict, printed = names["log_verdict"], capsys.readouterr().out
    assert verdict.en not in printed
    if not queues:
        assert "`.item()` waits for nothing" in verdict.en and "cannot test the model" in verdict.en
        assert "检验不了模型" in verdict.zh
    elif often[1] > rarely[1] and min(often) > 4.8:
        assert "slower in every one of the 5 rounds" in verdict.en
    else:
        assert "not slower in every round" in verdict.en


@pytest.mark.parametrize("engine_bound", [True, False])
def test_the_pages_mxnet_gaps_explain_the_miss_of_the_version_that_never_waits(engine_bound):
    """MXNet tab: the engine's idle time per step of no_blocking, spread over its operators,
    is the whole of the model's miss for it; only what the waiting versions miss beyond the
    same gaps around their extra operators is put down to their waits (numbers as in a CPU
    run of the page). When the Python thread is the slower side, no such split is made."""
    from d2l_ext.utils import Timing

    def c(host, device, launches):
        return {"host": [host], "device": [device], "launches": launches}

    costs = {"original": c(2.75, 4.71, 200), "sort": c(3.02, 4.76, 190),
             "no_blocking": c(2.53 if engine_bound else 5.0, 4.78, 160)}
    profiled = {"original": 5.70, "sort": 6.05, "no_blocking": 5.19}
    model = {"original": 4.90, "sort": 5.07, "no_blocking": 4.78 if engine_bound else 5.0}
    one = Timing((0.005,))
    names = _page_names(costs=costs, profiled=profiled, model=model, final="no_blocking",
                        off={name: model[name] / profiled[name] - 1 for name in costs},
                        timings=dict.fromkeys(costs, one), cpu_timings=dict.fromkeys(costs, one),
                        t_host=Timing((0.0025, 0.0026)), t_host_cpu=Timing((0.0025, 0.0026)),
                        os=__import__("os"))
    exec(_page_code("mxnet", 'd2l.show(text_table([LOSS, d2l.say("host-device-sync/host-ms-in',
                    page=MEASURING),
         names)
    note = names["gap_note"]
    if engine_bound:
        assert "idle 0.41 ms per profiled step, spread over its 160 operators" in note.en
        assert "about 2.6 µs between two" in note.en and "the whole of its miss" in note.en
        # original: 0.80 - 0.41 - 40 × 2.56 µs = 0.29 ms; sort: 0.98 - 0.41 - 30 × 2.56 µs
        assert "original misses by 0.29 ms more per step, sort misses by 0.49 ms" in note.en
        assert "唤醒 Python 线程" in note.zh
    else:
        assert "the engine waited for the Python thread" in note.en
        assert "misses by" not in note.en
    # the timed loops' 5 ms of CPU time per step against 2.55 ms for one step: they disagree
    assert "cannot tell contention for the cores from noise" in names["contention"].en
    assert "no contention" not in names["contention_answer"].en


def test_the_pages_profiler_rule_says_nothing_when_it_would_fire_by_chance(capsys):
    """With one profile per version left (the others disturbed), the rule that a version
    stands apart would name one by chance for sure: the note says the run cannot tell, and
    names none."""
    from d2l_ext.utils import Timing

    def c(profiled):
        return {"host": [4.0], "host_B": [0.0], "device": [0.0], "device_B": [0.0],
                "B": [0.0], "profiled": [profiled]}

    costs = {"original": c(5.8), "where": c(4.6), "sort": c(4.5), "ignore_index": c(4.2)}
    timings = {name: Timing((0.004, 0.0041)) for name in costs}
    names = _page_names(costs=costs, calm={name: [c] for name, c in costs.items()},
                        timings=timings, t_host=Timing((0.004,)), queues=False, traced=False,
                        fixed=["where", "sort", "ignore_index"], first=timings["original"],
                        final="ignore_index")
    exec(_page_code(None, "def predicted_ms", page=MEASURING), names)
    assert names["by_chance"] == pytest.approx(1.0)
    assert "cannot tell whether the profiler cost any version more" in names["overhead_note"].en
    assert "stood apart for" not in names["overhead_note"].en
    assert "分辨不出" in names["overhead_note"].zh
