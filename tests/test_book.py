"""The chapter sources, their per-framework notebooks and the two languages agree."""

import json
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, notebooks, runinfo, site, sources, toc  # noqa: E402
from pipeline.config import BookError  # noqa: E402

from d2l_ext import catalogue  # noqa: E402
from d2l_ext.utils import formatted, show  # noqa: E402

CHAPTERS = sources.chapter_names()


def _structure(chapter: sources.Chapter) -> dict:
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    return {
        "headings": re.findall(r"^(#+) ", prose, re.M),
        "labels": re.findall(r"^\((\S+)\)=$", prose, re.M),
        "figures": re.findall(r"^```\{figure\} (\S+)", prose, re.M),
        "figure names": re.findall(r"^:name: (\S+)", prose, re.M),
        "drawn figures": re.findall(r"^:::\{drawn-figure\} (\S+)", prose, re.M),
        "framework blocks": re.findall(r"^:::\{framework\} (\w+)", prose, re.M),
        "values": sorted(m.group(0) for m in sources.PLACEHOLDER.finditer(prose)),
    }


def test_every_chapter_exists_in_both_languages():
    assert CHAPTERS, "no chapters found"
    zh = sorted(p.stem for p in (config.CHAPTERS / "zh").glob("*.md") if p.stem != "index")
    assert zh == CHAPTERS


@pytest.mark.parametrize("name", CHAPTERS)
def test_same_code_cells_in_both_languages(name):
    sources.check_same_code(sources.editions(name))  # raises BookError naming the cell


@pytest.mark.parametrize("chapter", [sources.parse(config.CHAPTERS / lang / f"{name}.md")
                                     for name in CHAPTERS for lang in ("en", "zh")],
                         ids=lambda c: f"{c.lang}-{c.name}")
def test_every_cited_value_is_inside_a_framework_block_and_bound_by_its_code(chapter):
    assert sources.check_values(chapter) == []


def test_a_value_outside_a_block_or_unbound_in_its_framework_is_reported(tmp_path):
    src = tmp_path / "demo.md"
    src.write_text("""# Demo

Shared prose cites {{x:.2f}}.

:::{framework} torch
Fine: {{x * len(ys)}} and {{[y for y in ys][0]}}.
:::

:::{framework} mxnet
Unbound: {{y_only_in_torch}}.
:::

```{code-cell} ipython3
!pip install nothing
x = 1.0
```

```{code-cell} ipython3
:tags: [torch]
ys, y_only_in_torch = [1], 2
```
""", encoding="utf-8")
    problems = sources.check_values(sources.parse(src))
    assert len(problems) == 2
    assert "{{x:.2f}} outside a framework block" in problems[0]
    assert "reads y_only_in_torch, which no mxnet code cell binds" in problems[1]


def test_different_code_in_a_translation_is_refused(tmp_path):
    for lang, comment, value in (("en", "# one", 1), ("zh", "# 一", 2)):
        (tmp_path / lang).mkdir()
        (tmp_path / lang / "demo.md").write_text(
            f"# Demo\n\n```{{code-cell}} ipython3\nx = 0  {comment}\n```\n\n"
            f"```{{code-cell}} ipython3\nx = {value}\n```\n", encoding="utf-8")
    versions = {lang: sources.parse(tmp_path / lang / "demo.md") for lang in ("en", "zh")}
    with pytest.raises(BookError, match="code cell 2 of .*zh/demo.md differs"):
        sources.check_same_code(versions)


@pytest.mark.parametrize("name", CHAPTERS)
def test_same_sections_figures_and_values_in_both_languages(name):
    en, zh = (sources.parse(config.CHAPTERS / lang / f"{name}.md") for lang in ("en", "zh"))
    assert _structure(en) == _structure(zh)
    for lang in ("en", "zh"):
        for figure in _structure(en)["figures"]:
            assert (config.CHAPTERS / lang / figure).is_file(), f"{lang}: {figure} is missing"


DRAINS = ("barrier()", "npx.waitall()", "torch.cuda.synchronize(", ".wait_to_read()",
          "d2l.synchronize(")
TIMER_STARTS = re.compile(r"\s*(with d2l\.Benchmark\(|start(_event)? = |start_event\.record\()")


@pytest.mark.parametrize("name", CHAPTERS)
def test_timed_blocks_start_with_the_queue_drained(name):
    """Every timer starts right after a barrier (within two statements), so that it does not
    count work an earlier line left in the queue (d2l's MXNet page did, and measured 2x)."""
    chapter = sources.parse(config.CHAPTERS / "en" / f"{name}.md")
    for cell in (c for c in chapter.cells if c.kind == "code"):
        lines = [line for line in cell.source.splitlines()
                 if line.strip() and not line.strip().startswith("#")]
        for i, line in enumerate(lines):
            if TIMER_STARTS.match(line) and "Event(" not in line:
                before = lines[max(0, i - 2):i]
                assert any(d in b for b in before for d in DRAINS), \
                    f"{name}: no barrier before the timer in\n" + "\n".join(before + [line])


def test_the_drain_check_catches_an_undrained_timer(tmp_path):
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "demo.md").write_text(
        "# Demo\n\n```{code-cell} ipython3\ny = x + 1\nstart = time.perf_counter()\n```\n",
        encoding="utf-8")
    import unittest.mock
    with unittest.mock.patch.object(config, "CHAPTERS", tmp_path):
        with pytest.raises(AssertionError, match="no barrier before the timer"):
            test_timed_blocks_start_with_the_queue_drained("demo")


HAN = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"


@pytest.mark.parametrize("name", CHAPTERS + ["index"])
def test_chinese_lines_are_not_broken_between_characters(name):
    """A line break inside Chinese prose renders as a stray space between two characters."""
    text = (config.CHAPTERS / "zh" / f"{name}.md").read_text(encoding="utf-8")
    broken = re.findall(f"[{HAN}]\n[{HAN}]", text)
    assert broken == [], f"zh/{name}.md breaks a line inside Chinese text: {broken[:3]}"


def test_the_multi_gpu_page_shows_the_ddp_loop():
    """The page teaches DistributedDataParallel with the code itself, not hidden in d2l_ext."""
    chapter = sources.parse(config.CHAPTERS / "en" / "multi-gpu-concise.md")
    torch_code = "\n".join(c.source for c in chapter.cells
                           if c.kind == "code" and c.framework == "torch")
    for call in ("dist.init_process_group(", "DistributedDataParallel(net",
                 "DistributedSampler(", "sampler.set_epoch(epoch)", "dist.all_reduce(",
                 "if rank == 0:", "dist.broadcast(", "torch.distributed.run"):
        assert call in torch_code, f"the page does not show {call}"


def test_comment_stripping_keeps_code_and_nbval_markers():
    a = '# NBVAL_CHECK_OUTPUT\ndef f():\n    """English."""\n    return 1  # one\n'
    b = '# NBVAL_CHECK_OUTPUT\ndef f():\n    """中文。"""\n    return 1  # 一\n'
    assert sources.code_only(a) == sources.code_only(b)
    assert sources.code_only(a) != sources.code_only(a.replace("return 1", "return 2"))
    assert "NBVAL_CHECK_OUTPUT" in sources.code_only(a)


def test_executed_notebooks_are_up_to_date():
    assert notebooks.stale() == []


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_split_notebooks_hold_one_framework(name, lang):
    chapter = sources.parse(config.CHAPTERS / lang / f"{name}.md")
    for fw, other in (("torch", "mxnet"), ("mxnet", "torch")):
        nb = notebooks.split(chapter, fw)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert f"from d2l_ext import {fw} as d2l" in code
        assert f"from d2l_ext import {other} as d2l" not in code
        assert ":::{framework}" not in prose
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert first_code.metadata["d2l_ext"]["role"] == "install"
        assert f"d2l-ext[{fw}]" in first_code.source
        assert "D2L_SMOKE" in code  # the one visible size knob


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_executed_notebooks_record_their_run_and_have_no_errors(name, lang):
    for fw in config.FRAMEWORKS:
        nb = nbformat.read(config.NOTEBOOKS / lang / fw / f"{name}.ipynb", 4)
        run = nb.metadata["d2l_ext"]["run"]
        assert run["machine"] and run["framework"] and run["date"]
        # first the run time, then the title and under it the run note
        assert [c.metadata.get("d2l_ext", {}).get("role") for c in nb.cells[:3]] == [
            "run-time", None, "run-note"]
        assert nb.metadata["language_info"]["pygments_lexer"] == "ipython3"  # the kernel's
        assert runinfo.machine_name(run, lang) in nb.cells[2].source
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.output_type == "error"]
        assert errors == []
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert not sources.PLACEHOLDER.search(prose), "a {{value}} was not filled in"


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("fw", ["torch", "mxnet"])
def test_both_editions_come_from_one_run(name, fw):
    en, zh = (nbformat.read(config.NOTEBOOKS / lang / fw / f"{name}.ipynb", 4)
              for lang in ("en", "zh"))
    assert en.metadata["d2l_ext"]["run"] == zh.metadata["d2l_ext"]["run"]
    # a value cited from a d2l.message is worded per language: the same numbers in each
    en_values, zh_values = en.metadata["d2l_ext"]["values"], zh.metadata["d2l_ext"]["values"]
    assert en_values.keys() == zh_values.keys()
    for key, value in en_values.items():
        assert sorted(_numbers_in(str(value))) == sorted(_numbers_in(str(zh_values[key]))), key
    assert en.metadata["d2l_ext"]["run"]["language"] == config.RUN_LANGUAGE

    def code(nb):
        return [c for c in nb.cells if c.cell_type == "code"]

    for a, b in zip(code(en), code(zh), strict=True):
        assert a.execution_count == b.execution_count
        if any(f in a.source for f in ("d2l.message(", "d2l.say(")) or a.outputs == b.outputs:
            continue  # a cell that prints through d2l.say/message answers in each language
        # a cell whose words are translated all the same (a script printing d2l.message, a
        # figure with d2l.label, d2l.train's plot): the same outputs and the same numbers
        assert _kinds(a) == _kinds(b), f"{name} ({fw}): {a.source[:60]!r}"
        # the same numbers, in the order each language puts them
        assert sorted(_numbers(a)) == sorted(_numbers(b)), f"{name} ({fw}): {a.source[:60]!r}"


def _kinds(cell) -> list:
    return [(o.output_type, o.get("name"), sorted(o.get("data", {}))) for o in cell.outputs]


def _numbers(cell) -> list[str]:
    return _numbers_in("".join(_texts(cell)))


def _numbers_in(text: str) -> list[str]:
    """The numbers in ``text``, thousands separators dropped (1,000 and 1000 are one number)."""
    return [n.replace(",", "") for n in re.findall(r"\d+(?:[.,]\d+)*", text)]


def _texts(cell) -> list[str]:
    """The text outputs of a code cell: printed, and displayed as plain text without a richer
    form (not a figure's repr)."""
    texts = []
    for o in cell.outputs:
        if o.output_type == "stream":
            texts.append(o.text)
        elif "data" in o and list(o.data) == ["text/plain"]:
            texts.append(o.data["text/plain"])
    return texts


# ---------------------------------------------------------------- the Chinese edition (#19)
# Chapters whose Chinese edition has been checked for issue #19 (tests/test_zh.py checks the
# outputs and terms of every chapter); add the others when they pass.
LOCALISED = ["async-computation", "multi-gpu-concise"]


@pytest.mark.parametrize("name", LOCALISED)
@pytest.mark.parametrize("fw", ["torch", "mxnet"])
def test_the_chinese_notebooks_figures_are_labelled_in_chinese(name, fw):
    """Each figure of a cell that labels it with d2l.label differs in the zh notebook (it is
    the Chinese rendering), where this machine has a Chinese font (the book's runs do)."""
    from d2l_ext import i18n

    if i18n.cjk_font() is None:
        pytest.skip("no Chinese font here: the figures stay English")
    en, zh = (nbformat.read(config.NOTEBOOKS / lang / fw / f"{name}.ipynb", 4)
              for lang in ("en", "zh"))
    for a, b in zip(*([c for c in nb.cells if c.cell_type == "code"] for nb in (en, zh))):
        if "d2l.label(" in a.source or "d2l.train(" in a.source:
            figures = [(x.data[m], y.data[m]) for x, y in zip(a.outputs, b.outputs)
                       for m in ("image/png", "image/svg+xml") if m in x.get("data", {})]
            assert figures and all(x != y for x, y in figures), a.source[:60]


@pytest.mark.parametrize("name", LOCALISED + ["index"])
def test_the_chinese_chapters_typography(name):
    """No space after a {ref} link before Chinese (it renders as "异步计算 一章"), no italics
    on Chinese, and accuracy is 准确率 (精度 is precision)."""
    chapter = sources.parse(config.CHAPTERS / "zh" / f"{name}.md")
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    prose = re.sub(r"\$[^$\n]*\$|\{\{[^}]*\}\}", "0", re.sub(r"`[^`\n]*`", "`c`", prose))
    assert not re.search(rf"\{{ref\}}`[^`]+` [{HAN}]", prose), \
        f"zh/{name}.md: a space after a {{ref}} link renders before the Chinese text"
    assert not re.search(rf"(?<![*\w])\*[^*\n]*[{HAN}][^*\n]*\*(?!\*)", prose), \
        f"zh/{name}.md: no italics on Chinese text"
    assert not re.search(r"(训练|测试|评估)精度", prose), f"zh/{name}.md: accuracy is 准确率"


def test_the_diagrams_are_drawn_by_figures_py_and_the_chinese_ones_speak_chinese():
    """chapters/*/img/*.svg are what tools/figures.py draws now; every label of the Chinese
    set is Chinese unless it is code or a name (the same in both sets)."""
    import figures

    for lang, text in figures.TEXT.items():
        for name, draw in figures.DIAGRAMS:
            path = config.CHAPTERS / lang / "img" / f"{name}.svg"
            assert path.read_text(encoding="utf-8") == draw(text), \
                f"{path} is out of date: run python tools/figures.py"
    for key, zh in figures.TEXT["zh"].items():
        assert re.search(f"[{HAN}]", zh) or zh == figures.TEXT["en"][key], key
    assert "内核" not in "".join(figures.TEXT["zh"].values())  # kernel: 核函数


def test_parser_and_splitter_on_a_small_source(tmp_path):
    (tmp_path / "en").mkdir()
    src = tmp_path / "en" / "demo.md"
    src.write_text("""---
kernelspec: {name: python3}
---
# Demo

Shared text.

:::{framework} torch
Only PyTorch, value {{x:.1f}}.
:::

:::{framework} mxnet
Only MXNet.
:::

```{code-cell} ipython3
x = 1.0
```

```{code-cell} ipython3
:tags: [torch]
import torch
```

```{code-cell} ipython3
:tags: [torch, hide-input]
print(x)
```
""", encoding="utf-8")
    chapter = sources.parse(src)
    assert [(c.kind, c.tags) for c in chapter.cells] == [
        ("markdown", []), ("code", []), ("code", ["torch"]), ("code", ["torch", "hide-input"])]
    torch_nb, mxnet_nb = notebooks.split(chapter, "torch"), notebooks.split(chapter, "mxnet")
    shown, hidden = [c for c in torch_nb.cells if c.cell_type == "code"][-2:]
    assert "jupyter" not in shown.metadata and "cellView" not in shown.metadata
    assert hidden.metadata["tags"] == ["hide-input"]  # the site's toggle
    assert hidden.metadata["jupyter"] == {"source_hidden": True}  # JupyterLab, Studio Lab
    assert hidden.metadata["cellView"] == "form"  # Colab
    assert "Only PyTorch" in torch_nb.cells[0].source
    assert "Only MXNet" not in torch_nb.cells[0].source
    assert "Only MXNet" in mxnet_nb.cells[0].source
    assert [c.source for c in mxnet_nb.cells if c.cell_type == "code"][1:] == ["x = 1.0"]
    assert notebooks.placeholders(torch_nb) == {"{{x:.1f}}": ("x", ".1f")}
    assert notebooks.code_hash(torch_nb) != notebooks.code_hash(mxnet_nb)


def test_probe_reports_machine_and_versions(capsys):
    pytest.importorskip("torch")
    exec(runinfo.probe("torch"), {})
    run = json.loads(capsys.readouterr().out)
    assert {"machine", "gpus", "gpu", "driver", "cuda", "cpu", "framework", "python",
            "date"} <= set(run)
    assert run["framework"].startswith("PyTorch 2.")
    assert re.fullmatch(r"CPU only \(.+\)|\d+ x .+", run["machine"])
    assert (run["gpus"] == 0) == run["machine"].startswith("CPU only")


def test_run_note_names_the_machine_in_the_page_language():
    run = {"machine": "CPU only (Intel Xeon)", "gpus": 0, "cpu": "Intel Xeon",
           "framework": "PyTorch 2.13.0", "python": "3.11", "date": "2026-11-22", "size": "full"}
    assert "CPU only (Intel Xeon)" in runinfo.run_note(run, "en")
    assert "仅 CPU（Intel Xeon）" in runinfo.run_note(run, "zh")
    gpu = dict(run, machine="1 x NVIDIA H100 80GB HBM3", gpus=1, gpu="NVIDIA H100 80GB HBM3")
    assert "1 块 NVIDIA H100 80GB HBM3" in runinfo.run_note(gpu, "zh")
    assert "1 \u00d7 NVIDIA H100 80GB HBM3" in runinfo.run_note(gpu, "en")


def test_unknown_framework_block_is_refused(tmp_path):
    src = tmp_path / "bad.md"
    src.write_text("# Bad\n\n:::{framework} jax\ntext\n:::\n", encoding="utf-8")
    with pytest.raises(BookError, match="jax"):
        sources.parse(src)


def test_site_ships_only_the_mathjax_bundle_its_pages_load(tmp_path):
    mathjax = tmp_path / "mathjax"
    (mathjax / "output").mkdir(parents=True)
    for name in [site.MATHJAX_BUNDLE, "tex-svg.js", "mml-chtml.js", "node-main.js",
                 "output/svg.js"]:
        (mathjax / name).write_text("")
    site.prune_mathjax(tmp_path)
    assert sorted(p.relative_to(mathjax).as_posix() for p in mathjax.rglob("*.js")) == \
        sorted([site.MATHJAX_BUNDLE, "output/svg.js"])
    (mathjax / site.MATHJAX_BUNDLE).unlink()
    with pytest.raises(BookError, match="sphinx-mathjax-offline"):
        site.prune_mathjax(tmp_path)


SHOWN_CODE = {  # chapter: (what its PyTorch tab must show, what its MXNet tab must show)
    "tuning-tips": (
        ("FlopCounterMode(", "num_workers=", "persistent_workers=True", "non_blocking=True",
         "d2l.DeviceLoader(", "torch.backends.cudnn.benchmark", "torch.autocast(",
         "torch.amp.GradScaler(", "scaler.scale(loss).backward()",
         "memory_format=torch.channels_last", "bias=False", "optimizer.zero_grad()",
         "torch.compile(gelu)", "fused=True", "tuning.lr_lambda(", "ladder.run(",
         "ladder.plot(", "torch.set_num_threads(", "torch.get_num_interop_threads()",
         "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
         "TorchFunctionMode", "saved_tensors_hooks(", "torch.inference_mode",
         "torch.no_grad", "set_logs(recompiles=True)", "drop_last=drop_last",
         "torch._dynamo.explain(", "ddp.no_sync()", "register_comm_hook(",
         "ladder.time_to_target(", "ladder.profile_rung(", "ladder.peak_flops(",
         "ladder.amp_step_timings(", "d2l.split_time(",
         "d2l.gpu_runs.table("),
        ("gluon.data.DataLoader(", "num_workers=", "hybridize(static_alloc=True",
         "MXNET_CUDNN_AUTOTUNE_DEFAULT", "use_bias=False",
         "lr_scheduler.CosineScheduler(", 'amp.init(target_dtype="bfloat16")',
         "mx.npx.set_np()", "d2l.Training(",
         "d2l.paired_verdict(")),
    "host-device-sync": (
        ("torch.accelerator.current_accelerator()", "torch.nonzero(", "torch.unique(",
         "sync_profile.profile_steps(", "record_function(", "sync_profile.step_costs(",
         "export_chrome_trace(", 'sort_by="self_cpu_time_total"', "trace.load_trace(",
         "sync_profile.draw_last_step(", "torch.where(", "torch.count_nonzero(",
         "ignore_index=IGNORE",
         "torch.where(mask)", "torch.nonzero_static(", "output_size=total", ".item() / log_every",
         "d2l.measure(", 'set_sync_debug_mode("warn")', 'set_sync_debug_mode("error")',
         "pageable.copy_(x, non_blocking=True)", "sync_profile.sync_points(",
         "def predicted_ms("),
        ("np.unique(", "mx.profiler.set_config(", "mx.profiler.Task(", "dump(finished=False)",
         'dumps(reset=True, sort_by="total")', "np.where(", "np.sort(", "def loss_sort(",
         "sync_profile_mxnet.load_events(", "sync_profile_mxnet.draw_steps(",
         "sync_profile_mxnet.step_costs(", "d2l.measure(", "float(running) / log_every",
         "def predicted_ms(")),
    "gpu-basics": (
        ("torch.accelerator.is_available()", "torch.cuda.get_device_properties(",
         "device=device", ".to(device)", "memory.Tracker(device)", "tracker.mark(",
         "torch.accelerator.memory_allocated", "torch.accelerator.memory_reserved",
         "torch.accelerator.empty_cache", "torch.accelerator.get_memory_info",
         "torch.cuda.memory._record_memory_history(", "torch.cuda.memory._dump_snapshot(",
         ".pin_memory()", "torch.accelerator.empty_host_cache", "non_blocking=True",
         "d2l.time_per_call(", "torch.mm(", "torch.mv(", "d2l.split_time(",
         "d2l.tuning.backend_flags(", "datasheets.for_gpu(",
         'd2l.gpu_runs.table("gpu-basics"',
         "torch.cuda.graph(", "graph.replay", "torch.cuda.Stream(", "side.wait_stream(main)",
         "A.record_stream(side)", 'TORCH_CUDA_SANITIZER="1"', "trace.plot_timeline(",
         "replicate(module, devices)", "scatter(inputs, devices)",
         "parallel_apply(replicas, inputs)", "gather(outputs,", "nn.DataParallel(",
         ".share_memory_()", "net.share_memory()", 'mp.get_context("spawn")'),
        ("mx.context.num_gpus()", "mx.gpu(i)", "mx.context.gpu_memory_info(", "ctx=device",
         ".as_in_ctx(device)", "mx.current_context()", "list_ctx()",
         "mx.profiler.set_config(profile_memory=True", "mx.profiler.Marker(",
         "device.empty_cache()", "mx.cpu_pinned(0)", "d2l.measure(", "np.dot(",
         "gluon.utils.split_and_load(", "p.list_grad()", 'mx.Context("cpu_shared", 0)')),
    "communication": (
        ("comm.spawn(", "dist.send(", "dist.recv(", "via.batch_isend_irecv(", "dist.P2POp(",
         "dist.all_reduce(", "comm.timing(", "comm.fit_alpha_beta(", "def ring_all_reduce(",
         "def server_all_reduce(", "comm.bus_bandwidth(", "def average_gradients(",
         "DDP(mlp(width))", "bucket_cap_mb=", "export_chrome_trace(", "trace.plot_timeline(",
         "ddp.no_sync()", "register_comm_hook(", "default_hooks.fp16_compress_hook",
         "powerSGD_hook.PowerSGDState(", "%%writefile comm_lab.py"),
        ("mx.kv.create(", "kv.push(", "kv.pull(", "kv.pushpull(", "kvstore.launch(",
         "%%writefile ps_hello.py", "split_and_load(", "set_gradient_compression(",
         "kv.set_optimizer(", 'grad_req = "add"', "comm.fit_alpha_beta(", "kvstore.timing(",
         "gluon.Trainer(", "d2l.measure(")),
    "memory": (  # the chapter's pages: memory, memory-sharding, memory-oom
        ("memory.Tracker(device)", "tracker.mark(", "memory.SavedTensors(", "tracker.timeline()",
         "foreach", "torch.autocast(", "model.to(torch.bfloat16)",
         "checkpoint_sequential(", "use_reentrant=False", "torch.equal(",
         "ZeroRedundancyOptimizer(", "fully_shard(", "reshard_after_forward=", "comm.spawn(",
         'source = "malloc" if device.type == "cpu"', "torch.cuda.memory_reserved(",
         "torch.cuda.empty_cache()",
         "torch.cuda.memory._record_memory_history(", "torch.cuda.memory._dump_snapshot(",
         "memory.load_timeline(", "%%writefile memory_lab.py", "fused=True", "warm_up("),
        ("mxnet_memory.StorageCounter()", "counter.read()", "multi_precision=",
         'MXNET_BACKWARD_DO_MIRROR', ".simple_bind(", "hybridize(**flags)",
         '"static_alloc": True', "mx.context.gpu_memory_info(", "empty_cache()",
         "autograd.record()", "d2l.measure(", "budget.kvstore_server_numbers(")),
    "transformers": (
        ("tx.GPT(cfg", "FlopCounterMode(", "flop_counter.get_flop_counts()",
         "gpt_counts.training_flops_per_token(cfg)", "text.windows(", "torch.autocast(",
         "d2l.synchronize(device)", "matmul_flops_per_second(device", "tx.saved_by_node(",
         "tx.saved_terms(",
         "memory.SavedTensors(", "create_selective_checkpoint_contexts", "CheckpointPolicy.",
         "checkpoint(block, h, use_reentrant=False)", "memory.Tracker(device)",
         "def naive_attention(", "def tiled_attention(", "attention.attention_peaks(",
         "attention.count_traffic(", "attention.sdpa_backend(", "sdpa_kernel(SDPBackend.MATH)",
         "create_block_mask(", "flex_attention(q, k, v, block_mask=block_mask)"),
        ("txm.GPT(", "gpt_counts.training_flops_per_token(cfg)", "text.windows(",
         "autograd.record()", "gluon.Trainer(", "npx.waitall()", "counter.current()",
         "d2l.measure(", "def naive_attention(", "def tiled_attention(",
         "attention_mxnet.attention_peaks(")),
}


@pytest.mark.parametrize("name", sorted(SHOWN_CODE))
def test_the_page_shows_the_code_it_teaches(name):
    """Each tip's or fix's code is on the page, under its framework, not only in d2l_ext,
    and in view: not in a cell collapsed as presentation (``hide-input``)."""
    cells = [cell for page in toc.read()[name]  # the chapter's pages, its sections' too
             for cell in sources.parse(config.CHAPTERS / "en" / f"{page}.md").cells]
    for framework, calls in zip(("torch", "mxnet"), SHOWN_CODE[name]):
        code = "\n".join(c.source for c in cells
                         if c.kind == "code" and c.framework in (None, framework)
                         and notebooks.HIDE_INPUT not in c.tags)
        missing = [call for call in calls if call not in code]
        assert missing == [], f"{name}: the {framework} tab does not show {missing}"


def test_the_sync_pages_losses_are_the_librarys():
    """The four losses the page teaches equal d2l_ext.segmentation's copy (which the
    library tests check against a float64 reference), value and gradient."""
    torch = pytest.importorskip("torch")
    from d2l_ext import segmentation

    chapter = sources.parse(config.CHAPTERS / "en" / "host-device-sync.md")
    names = {"torch": torch, "F": torch.nn.functional}
    for cell in chapter.cells:
        if cell.kind == "code" and cell.framework == "torch" and re.search(
                r"^def loss_(original|where|sort|ignore_index)\(", cell.source, re.M):
            exec(cell.source.split("\n\nlosses = ")[0], names)
    names.update(IGNORE=-1, NUM_CLASSES=10, BACKGROUND=9)
    pred = torch.randn(2, 10, 8, 8)
    _, labels = segmentation.random_batch(2, size=8, seed=7)
    for target in (labels, torch.full_like(labels, 4), torch.where(labels > 3, 9, 1)):
        for variant in segmentation.VARIANTS:
            ours = pred.clone().requires_grad_()
            theirs = pred.clone().requires_grad_()
            a = names[f"loss_{variant}"](ours, target)
            b = segmentation.MaskedCrossEntropy(variant)(theirs, target)
            a.backward()
            b.backward()
            torch.testing.assert_close(a, b, equal_nan=True)
            torch.testing.assert_close(ours.grad, theirs.grad, equal_nan=True)


def _page_functions(page: str, framework: str, names: dict, pattern: str) -> dict:
    """Run the cells of ``page`` (en) under ``framework`` that define a function matching
    ``pattern`` in ``names``, and return ``names``."""
    chapter = sources.parse(config.CHAPTERS / "en" / f"{page}.md")
    for cell in chapter.cells:
        if (cell.kind == "code" and cell.framework == framework
                and re.search(pattern, cell.source, re.M)):
            exec(cell.source, names)
    return names


def test_the_attention_pages_torch_functions_are_the_librarys():
    """The naive and the tiled attention the page teaches give d2l_ext.transformer's (which
    the library tests check against SDPA), at lengths that are not multiples of the block
    and in bfloat16."""
    torch = pytest.importorskip("torch")
    from d2l_ext import transformer

    names = _page_functions("transformers-attention", "torch", {"torch": torch},
                            r"^def (naive|tiled)_attention\(")
    generator = torch.Generator().manual_seed(3)
    for s, block in ((37, 8), (64, 64), (5, 64), (130, 32)):
        q, k, v = (torch.randn(2, 3, s, 16, generator=generator) for _ in range(3))
        torch.testing.assert_close(names["naive_attention"](q, k, v),
                                   transformer.naive_attention(q, k, v, causal=True))
        torch.testing.assert_close(names["tiled_attention"](q, k, v, block=block),
                                   transformer.tiled_attention(q, k, v, True, block, block))
        qb, kb, vb = (t.bfloat16() for t in (q, k, v))
        assert torch.equal(names["tiled_attention"](qb, kb, vb, block=block),
                           transformer.tiled_attention(qb, kb, vb, True, block, block))


def test_the_attention_pages_mxnet_functions_are_the_librarys():
    pytest.importorskip("mxnet")
    from mxnet import np, npx

    from d2l_ext import transformer_mxnet

    npx.set_np()
    names = _page_functions("transformers-attention", "mxnet", {"np": np, "npx": npx},
                            r"^def (naive|tiled)_attention\(")
    for s, block in ((37, 8), (64, 64), (5, 64), (130, 32)):
        q, k, v = (np.random.normal(size=(2, 3, s, 16)) for _ in range(3))
        for ours, theirs in ((names["naive_attention"](q, k, v),
                              transformer_mxnet.naive_attention(q, k, v, causal=True)),
                             (names["tiled_attention"](q, k, v, block=block),
                              transformer_mxnet.tiled_attention(q, k, v, True, block, block))):
            assert float(np.abs(ours - theirs).max()) < 1e-5


def test_the_sync_page_counts_each_synchronisation_once():
    """The sync pages' sync_points (d2l_ext.sync_profile) keeps the outermost of nested
    syncing operators (on a GPU,
    unique reads its count with an item of its own) and every separate one; it counts an
    index assignment of a Python number (index_put_ right after the lift_fresh that wrapped
    the number) unless it became a masked_fill_, and then nothing inside it either (the item
    of the number's host tensor); an index_put_ of a tensor is no wait of its own."""
    from d2l_ext import sync_profile, trace

    names = {"sync_points": sync_profile.sync_points}
    E = trace.Event
    events = [E("aten::index", "h", 0, 10, "cpu_op"), E("aten::nonzero", "h", 1, 2, "cpu_op"),
              E("aten::_unique2", "h", 20, 10, "cpu_op"),
              E("aten::_local_scalar_dense", "h", 25, 1, "cpu_op"),
              E("aten::count_nonzero", "h", 40, 1, "cpu_op"),
              E("aten::_local_scalar_dense", "h", 50, 1, "cpu_op")]
    assert [e.start_us for e in names["sync_points"](events)] == [1, 20, 50]
    number = [E("aten::lift_fresh", "h", 100, 1, "cpu_op"),  # t[idx] = -1: waits on a GPU
              E("aten::index_put_", "h", 110, 20, "cpu_op"),
              E("aten::_index_put_impl_", "h", 111, 18, "cpu_op"),
              E("aten::lift_fresh", "h", 200, 1, "cpu_op"),  # t[mask] = -1: masked_fill_
              E("aten::index_put_", "h", 210, 20, "cpu_op"),
              E("aten::_local_scalar_dense", "h", 212, 1, "cpu_op"),
              E("aten::masked_fill_", "h", 215, 5, "cpu_op"),
              E("aten::clone", "h", 300, 5, "cpu_op"),  # t[idx] = tensor: no wait of its own
              E("aten::index_put_", "h", 310, 20, "cpu_op"),
              E("aten::lift_fresh", "h", 399, 1, "cpu_op"),  # on another thread: not its own
              E("aten::index_put_", "other", 400, 20, "cpu_op"),
              E("aten::lift_fresh", "h", 500, 1, "cpu_op"),  # t[1:, idx] = -1: a view between
              E("aten::slice", "h", 502, 4, "cpu_op"), E("aten::as_strided", "h", 503, 1, "cpu_op"),
              E("aten::index_put_", "h", 510, 20, "cpu_op"),
              E("aten::lift_fresh", "h", 600, 1, "cpu_op"),  # t[idx] = torch.tensor(-1.0)
              E("aten::detach_", "h", 602, 3, "cpu_op"), E("detach_", "h", 603, 1, "cpu_op"),
              E("aten::index_put_", "h", 610, 20, "cpu_op"),
              E("aten::lift_fresh", "h", 700, 1, "cpu_op"),  # an op that computes in between
              E("aten::add", "h", 702, 2, "cpu_op"),
              E("aten::index_put_", "h", 710, 20, "cpu_op")]
    assert [(e.name, e.start_us) for e in names["sync_points"](number)] == [
        ("aten::index_put_", 110), ("aten::index_put_", 510), ("aten::index_put_", 610)]
    element = [E("aten::lift_fresh", "h", 100, 1, "cpu_op"),  # t[3] = -1: copy_, on a GPU waits
               E("aten::select", "h", 102, 2, "cpu_op"),
               E("aten::as_strided", "h", 103, 1, "cpu_op"),
               E("aten::copy_", "h", 110, 5, "cpu_op"),
               E("aten::lift_fresh", "h", 200, 1, "cpu_op"),  # t[1:4] = -1: fill_ reads on the host
               E("aten::slice", "h", 202, 2, "cpu_op"),
               E("aten::fill_", "h", 210, 9, "cpu_op"),
               E("aten::_local_scalar_dense", "h", 211, 1, "cpu_op"),  # a GPU: item of host value
               E("aten::copy_", "h", 215, 2, "cpu_op"),  # a CPU: fill_ copies, inside
               E("aten::lift_fresh", "h", 300, 1, "cpu_op"),  # a copy_ inside another op
               E("aten::_to_copy", "h", 305, 10, "cpu_op"), E("aten::copy_", "h", 306, 5, "cpu_op"),
               E("aten::empty", "h", 400, 1, "cpu_op"),  # a copy_ of no fresh host tensor
               E("aten::copy_", "h", 405, 5, "cpu_op")]
    assert [(e.name, e.start_us) for e in names["sync_points"](element)] == [("aten::copy_", 110)]


MEASURING = "host-device-sync-measuring"  # the sync chapter's section page


def _sync_page_code(framework, start, end=None, page="host-device-sync"):
    """The source of the English sync page's (`page`'s) code cell of `framework` (None:
    shared) that has a line starting with `start`, with its collapsed presentation
    (page_cells.cell_with_presentation), from that line to the line before `end` (default:
    the end)."""
    from page_cells import cell_with_presentation

    chapter = sources.parse(config.CHAPTERS / "en" / f"{page}.md")
    code = cell_with_presentation(chapter.cells, start, framework)  # with its hidden cells
    found = re.search(rf"^{re.escape(start)}", code, re.M)
    assert found, f"no line of the {framework} cell with {start!r} starts with it"
    code = code[found.start():]
    return code if end is None else code[:code.index(end)]


def test_the_sync_pages_cost_model_splits_a_step_at_its_first_and_last_sync():
    """step_split, per step: host busy = step - waits; B from the end of the first
    synchronisation to the end of the last, its length and the host's and the device's busy
    time in it; device time counted once where work overlaps, and the profiled step's length,
    as means. The model is max(h_A, d_A) + t_B, with max(h_B, d_B) <= t_B <= h_B + d_B, and a
    single synchronisation makes no B."""
    import collections
    import itertools
    import statistics
    from types import SimpleNamespace

    from d2l_ext import i18n, sync_profile, trace

    names = {"trace": trace, "collections": collections, "itertools": itertools,
             "statistics": statistics,
             "d2l": SimpleNamespace(message=i18n.message, say=catalogue.say, show=show,
                                   listing=catalogue.listing)}
    names |= {name: getattr(sync_profile, name) for name in
              ("step_split", "in_order", "mean", "merged", "median")}
    names["formatted"] = formatted
    exec(_sync_page_code(None, "def with_range", "\n\n\nfor note in"), names)
    exec(_sync_page_code(None, "def predicted_ms", "\n\n\nmodel = ", MEASURING), names)
    E = trace.Event
    step = E("step", "h", 0, 100)
    syncs = [E("nonzero", "h", 10, 10), E("unique", "h", 40, 10), E("nonzero", "h", 60, 2)]
    waits = [E("wait", "h", 12, 8), E("wait", "h", 45, 5)]
    device = [E("k", "d", 0, 18), E("k", "d", 5, 5), E("k", "d", 22, 8), E("k", "d", 55, 3),
              E("k", "d", 70, 50)]
    c = names["step_split"]([step], syncs, waits, device, 120)
    assert c == {key: [pytest.approx(value)] for key, value in {
        "waits": 0.013, "host": 0.087, "B": 0.042, "host_B": 0.037, "device_B": 0.011,
        "device": 0.079, "profiled": 0.120}.items()}
    assert max(0.037, 0.011) <= c["B"][0] <= 0.037 + 0.011
    assert names["predicted_ms"](c) == pytest.approx(max(0.050, 0.068) + 0.042)
    one = names["step_split"]([step], syncs[:1], waits[:1], device, 120)
    assert one["B"] == one["host_B"] == one["device_B"] == [0]
    assert names["predicted_ms"](one) == pytest.approx(max(0.092, 0.079))
    two = names["step_split"]([step, E("step", "h", 100, 50)], syncs, waits, device, 150)
    assert two["host"] == pytest.approx([0.087, 0.050]) and two["B"] == pytest.approx([0.042, 0])
    assert two["device"] == pytest.approx([0.079 / 2]) and two["profiled"] == [0.075]
    assert names["with_range"]([1.0, 2.0, 3.0]) == "2.00 (1.00–3.00)"
    assert names["with_range"]([0.5]) == "0.50"
    assert names["with_range"]([0.0, 0.0]) == names["with_range"]([0.0]) == "0"  # exact zeros
    assert names["with_range"]([1.0, 2.0, 3.0]).zh == "2.00（1.00–3.00）"
    assert names["in_order"](["a", "b", "b", "b", "a"]) == "a, b ×3, a"
    assert names["in_order"](["a", "b", "b", "b", "a"]).zh == "a、b ×3、a"
    assert names["in_order"]([]) == "–"
    both = names["merged"]([dict(two, syncs=6, order="x"), dict(one, syncs=6, order="y")])
    assert both["host"] == pytest.approx([0.087, 0.050, 0.092]) and both["syncs"] == 6
    assert both["profiled"] == [0.075, 0.120] and both["order"] == "x"
    assert names["median"](both["profiled"]) == pytest.approx(0.0975)


def _sync_page_gpu_state(on_gpu):
    """The names the PyTorch tab's cells after the profiles read, as a run on a CUDA GPU
    (`on_gpu`, figures like the book's H100 run) or on a CPU would leave them."""
    import statistics
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    from d2l_ext import gpu_runs, i18n, sync_profile
    from d2l_ext.utils import Timing, text_table

    def terms(syncs, calls, waits, host, device, b, host_b, device_b, launches):
        scale = 1 if on_gpu else 0
        return {"syncs": syncs, "order": "", "sync_calls": calls * scale,
                "launches": launches * scale, "waits": [waits * scale], "host": [host],
                "device": [device * scale], "B": [b], "host_B": [host_b],
                "device_B": [device_b * scale]}

    costs = {"original": terms(6, 6, 18.91, 8.79, 28.43, 4.41, 2.34, 3.38, 240),
             "where": terms(4, 4, 18.73, 8.79, 28.41, 3.90, 1.87, 3.20, 236),
             "sort": terms(3, 3, 17.90, 9.54, 28.58, 3.49, 1.94, 3.17, 250),
             "ignore_index": terms(0, 0, 0.03, 6.75, 25.03, 0, 0, 0, 200)}
    profiled = {"original": 30.39, "where": 29.97, "sort": 29.82, "ignore_index": 25.44}
    model = {"original": 29.46, "where": 29.11, "sort": 28.90, "ignore_index": 25.03}
    steps = {"model_only": 24.43, "original": 29.65, "where": 29.43, "sort": 29.31,
             "ignore_index": 25.15}
    return {"torch": torch, "device": torch.device("cuda" if on_gpu else "cpu"),
            "device_name": "cuda" if on_gpu else "CPU", "queues": on_gpu, "traced": on_gpu,
            "fix_clear": "faster",
            "losses": dict.fromkeys(costs), "final": "ignore_index",
            "costs": costs, "profiled": profiled, "model": model,
            "timings": {k: Timing((v / 1e3 * 0.995, v / 1e3, v / 1e3 * 1.01))
                        for k, v in steps.items()},
            "fix_speedup": 29.65 / 25.15, "t_host": Timing((0.00645,)),
            "log_timings": {1: Timing((0.02565,)), 4: Timing((0.02531,))},
            "debug_counts": dict(zip(costs, (6, 4, 3, 0))) if on_gpu else None,
            "mean": statistics.fmean, "text_table": text_table, "formatted": formatted,
            "sync_profile": sync_profile,
            "LOSS": i18n.message(en="loss", zh="损失函数"),
            "ms": lambda timing: timing.text("ms"),
            "d2l": SimpleNamespace(message=i18n.message, label=i18n.label, gpu_runs=gpu_runs,
                                   say=catalogue.say, figure_text=catalogue.figure_text,
                                   show=show, listing=catalogue.listing)}


@pytest.mark.parametrize("on_gpu", [True, False])
def test_the_sync_pages_gpu_figures_and_sentences_hold_on_either_device(on_gpu, monkeypatch,
                                                                        capsys):
    """The PyTorch tab's cells that compute the counts' check, the split of fix 3's gain,
    the model's miss and the table of key figures run on a scripted CUDA run (they cannot run
    here otherwise, and an exception there would waste a rare GPU run) and on a CPU run,
    whose sentences then cite the book's GPU run instead."""
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.delenv("D2L_CODE_VERSION", raising=False)
    names = _sync_page_gpu_state(on_gpu)
    exec(_sync_page_code("torch", "FIGURES = {"), names)
    main_note = names["kept_note"].en  # the main page's: the CUDA calls it counts
    for start in ("FIGURES = {", "def idle_ms(name):", "def figure(key, value"):
        exec(_sync_page_code("torch", start, page=MEASURING), names)
    printed = capsys.readouterr().out
    assert ("made 6 synchronising CUDA calls" in main_note and "H100" in main_note
            and "no count by operators" in main_note), main_note
    said = {key: names[key].en for key in
            ("count_check", "kept_note", "columns_note", "fix3_split", "miss_note")}
    assert "6/4/3/0" in said["kept_note"] and "H100" in said["kept_note"]
    # the gain without the profiler, 29.65 - 25.15 = 4.50 ms, less the device work fix 3 no
    # longer does, 28.43 - 25.03 = 3.40 ms, leaves 1.10 ms of idle time; the profiled steps'
    # idle time, (30.39 - 28.43) - (25.44 - 25.03) = 1.55 ms, is an upper bound only
    assert "4.50 ms less" in said["fix3_split"] and "3.40 ms of the gain" in said["fix3_split"]
    assert "the rest, 1.10 ms" in said["fix3_split"], said["fix3_split"]
    assert "fell by more, 1.55 ms" in said["fix3_split"] and "upper bound" in said["fix3_split"]
    if on_gpu:
        assert "made 6/4/3/0 synchronising CUDA/HIP calls" in said["count_check"]
        assert "between 3.38 and 5.72 ms" in said["columns_note"]
        assert said["fix3_split"].startswith("in this run, ")
        # 40 more launches than the final loss at its 2.05 µs of idle time each: 0.08 ms
        assert "about 0.08 ms are the gaps around the 40 kernels" in said["fix3_split"]
        assert "cost about 1.02 ms per step" in said["fix3_split"], said["fix3_split"]
        assert "0.41 ms per profiled step" in said["miss_note"], said["miss_note"]
        assert "about 2.0 µs" in said["miss_note"] or "about 2.1 µs" in said["miss_note"]
        assert ("original misses by 0.44 ms more per step, where misses by 0.38 ms more per "
                "step, sort misses by 0.41 ms more per step") in said["miss_note"]
        assert "two synchronisations, not one" in names["fix1_note"].en
        assert "this run (GPU)" in printed and "device idle ms" in printed
    else:
        assert "this run's device, CPU, made no such calls" in said["count_check"]
        assert said["count_check"].startswith("A CUDA or ROCm GPU's own runtime can check")
        assert "in the book's GPU run" in said["fix3_split"]
        assert "at most those 1.10 ms" in said["fix3_split"], said["fix3_split"]
        assert "the book's GPU record" in said["fix3_split"]
        assert "本书的 GPU 运行记录" in names["fix3_split"].zh
        assert "idle 0.41 ms" in said["miss_note"] and "2% short" in said["miss_note"]
        assert said["columns_note"] == ("This run is no exception: the original loss's waits "
                                        "and device time are both zero.")
        assert names["columns_note"].zh.startswith("本次运行也是如此")
        assert "this run (CPU)" in printed
        # model_only (24.31–24.67) was faster than original (29.50–29.95) in every round
        assert "so the loss added a cost of its own" in names["debug_note"].en
    row = next(x for x in printed.splitlines() if x.startswith("syncs per step"))
    assert row.split()[-2:] == (["6/4/3/0", "6/4/3/0"] if on_gpu else ["–", "6/4/3/0"])
    monkeypatch.setattr(names["d2l"].gpu_runs, "load", lambda chapter: None)
    exec(_sync_page_code("torch", "FIGURES = {"), names)
    assert "keeps no count" in names["kept_note"].en
    for start in ("FIGURES = {", "def idle_ms(name):"):
        exec(_sync_page_code("torch", start, page=MEASURING), names)
    assert "keeps no count" in names["kept_note"].en
    assert ("in this run, " if on_gpu else "keeps no GPU run") in names["fix3_split"].en


def test_the_sync_pages_counts_hold_on_another_accelerator(monkeypatch):
    """On MPS or XPU the index assignment makes its number on the device (no copy, no wait):
    sync_points counts 5/4/3/0, and the page says fix 1 removes one synchronisation there,
    with no CUDA calls to check the counts against."""
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    names = _sync_page_gpu_state(False)
    names["costs"]["original"]["syncs"] = 5
    names.update(device=names["torch"].device("mps"), device_name="mps")
    exec(_sync_page_code("torch", "FIGURES = {", "\no = costs["), names)
    assert "fix 1 removes 1 synchronisation here" in names["fix1_note"].en
    assert "修正 1 在这里去掉的是 1 次同步" in names["fix1_note"].zh
    assert "this run's device, mps, made no such calls" in names["count_check"].en


@pytest.mark.parametrize("first_profile", [1.37, 1.05])
def test_the_sync_pages_profiler_overhead_flags_a_version_that_stands_apart(first_profile,
                                                                            capsys):
    """The model cell reads each version's three profiles against its unprofiled median: a
    version whose every profile lies above (or below) all the others' profiles is named (as
    the original, profiled first, was in an earlier run); one profile within that range is
    enough not to be. The note states the rule's chance of naming one by luck (4 versions of 3
    profiles: 3.6%)."""
    import math
    import statistics
    from types import SimpleNamespace

    from d2l_ext import i18n
    from d2l_ext.utils import Timing, false_alarm, paired_verdict, text_table

    def c(profiled, host):
        return {"host": [host], "host_B": [0.0], "device": [0.0] * 3, "device_B": [0.0],
                "B": [0.0], "profiled": profiled}

    measured = {"original": 4.29, "where": 4.19, "sort": 4.32, "ignore_index": 4.11}
    costs = {"original": c([4.29 * first_profile, 4.29 * 1.36, 4.29 * 1.38], 5.8),
             "where": c([4.19 * 1.13, 4.19 * 1.06, 4.19 * 1.10], 4.7),
             "sort": c([4.32 * 1.05, 4.32 * 1.04, 4.32 * 1.07], 4.5),
             "ignore_index": c([4.11 * 1.04, 4.11 * 1.03, 4.11 * 1.05], 4.2)}
    timings = {k: Timing((v / 1e3, v / 1e3 * 1.02)) for k, v in measured.items()}
    names = {"costs": costs, "calm": {name: [c] for name, c in costs.items()},
             "timings": timings, "t_host": Timing((0.004, 0.0041)), "math": math,
             "queues": False, "traced": False, "fixed": ["where", "sort", "ignore_index"],
             "first": timings["original"], "final": "ignore_index", "mean": statistics.fmean,
             "median": statistics.median, "text_table": text_table,
             "ms": lambda timing: timing.text("ms"), "signed": lambda r: f"{r:+.0%}",
             "per_round": lambda a, b: [x / y for x, y in zip(a.times, b.times)],
             "span": lambda r: f"{min(r):.2f}–{max(r):.2f}",
             "LOSS": i18n.message(en="loss", zh="损失函数"),
             "d2l": SimpleNamespace(message=i18n.message, paired_verdict=paired_verdict,
                                    false_alarm=false_alarm, say=catalogue.say, show=show,
                                    listing=catalogue.listing)}
    exec(_sync_page_code(None, "def predicted_ms", page=MEASURING), names)
    note = names["overhead_note"]
    assert names["by_chance"] == pytest.approx(8 / 220 - 12 / (220 * 84))
    assert names["apart_chance"]([3, 3, 3]) == pytest.approx(6 / 84 - 6 / (84 * 20))
    assert names["apart_chance"]([2, 2, 2, 2]) == pytest.approx(0.257, abs=1e-3)
    assert "by chance with a probability of 4% here" in note.en
    if first_profile > 1.36:
        assert names["apart"] == ["original"]
        assert "cost stood apart for original (more), so a comparison with those" in note.en
        assert "性能分析器给 original（偏多）带来的开销与众不同" in note.zh
    else:
        assert names["apart"] == [] and "no version stood apart" in note.en
    assert "t_host: a median of 4.05 ms over 2 timings" in capsys.readouterr().out
    assert "tests nothing" in names["model_verdict"].en
    assert names["direction_verdict"].en == "there is nothing to test either"


def test_the_sync_pages_mxnet_waits_are_the_calls_that_ran_a_blocking_operator(tmp_path):
    """sync_profile_mxnet.load_events moves a call into MXNet that returned only after an
    operator with a
    data-dependent shape ran inside it to the row of waits, named after the operator; a call
    that only queued one (the operator ran later) stays a call."""
    pytest.importorskip("mxnet")
    from d2l_ext import sync_profile_mxnet as names
    api = {"cat": "MXNET_C_API", "pid": 1, "tid": 1}
    raw = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "cpu/0"}},
           {"ph": "b", "name": "original step 0", "cat": "steps", "id": 9, "ts": 0, "pid": 2},
           {"ph": "b", "name": "MXImperativeInvokeEx", "id": 1, "ts": 10, **api},
           {"ph": "B", "name": "_npi_unique", "cat": "operator", "ts": 30, "pid": 0, "tid": 5},
           {"ph": "E", "name": "_npi_unique", "cat": "operator", "ts": 35, "pid": 0, "tid": 5},
           {"ph": "e", "name": "MXImperativeInvokeEx", "id": 1, "ts": 40, **api},
           {"ph": "b", "name": "MXImperativeInvokeEx", "id": 2, "ts": 50, **api},
           {"ph": "e", "name": "MXImperativeInvokeEx", "id": 2, "ts": 52, **api},
           {"ph": "B", "name": "_contrib_boolean_mask", "cat": "operator", "ts": 60, "pid": 0,
            "tid": 5},
           {"ph": "E", "name": "_contrib_boolean_mask", "cat": "operator", "ts": 61, "pid": 0,
            "tid": 5},
           {"ph": "b", "name": "MXNDArraySyncCopyToCPU", "id": 3, "ts": 70, **api},
           {"ph": "e", "name": "MXNDArraySyncCopyToCPU", "id": 3, "ts": 80, **api},
           {"ph": "e", "name": "original step 0", "cat": "steps", "id": 9, "ts": 90, "pid": 2}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(raw))
    events = names.load_events(str(path))
    waits = names.waits_in(events, names.recorded_steps(events, "original"))
    assert [(e.name, e.start_us, e.duration_us) for e in waits] == [
        ("_npi_unique", 10, 30), ("MXNDArraySyncCopyToCPU", 70, 10)]
    calls = [e for e in events if e.track == "calls"]
    assert [(e.name, e.start_us) for e in calls] == [("MXImperativeInvokeEx", 50)]
