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
from pipeline import config, notebooks, runinfo, site, sources  # noqa: E402
from pipeline.config import BookError  # noqa: E402

CHAPTERS = sources.chapter_names()


def _structure(chapter: sources.Chapter) -> dict:
    prose = "\n".join(c.source for c in chapter.cells if c.kind == "markdown")
    return {
        "headings": re.findall(r"^(#+) ", prose, re.M),
        "labels": re.findall(r"^\((\S+)\)=$", prose, re.M),
        "figures": re.findall(r"^```\{figure\} (\S+)", prose, re.M),
        "figure names": re.findall(r"^:name: (\S+)", prose, re.M),
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


DRAINS = ("barrier()", "npx.waitall()", "torch.cuda.synchronize(", ".wait_to_read()")
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
        assert nb.cells[1].metadata["d2l_ext"]["role"] == "run-note"
        assert nb.metadata["language_info"]["pygments_lexer"] == "ipython3"  # the kernel's
        assert runinfo.machine_name(run, lang) in nb.cells[1].source
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
    for key in ("run", "values"):
        assert en.metadata["d2l_ext"][key] == zh.metadata["d2l_ext"][key]
    assert en.metadata["d2l_ext"]["run"]["language"] == config.RUN_LANGUAGE

    def outputs(nb):  # the checks that answer in the reader's language apart
        return [(c.execution_count, c.outputs) for c in nb.cells if c.cell_type == "code"
                and "d2l.message(" not in c.source]
    assert outputs(en) == outputs(zh)


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
""", encoding="utf-8")
    chapter = sources.parse(src)
    assert [(c.kind, c.tags) for c in chapter.cells] == [
        ("markdown", []), ("code", []), ("code", ["torch"])]
    torch_nb, mxnet_nb = notebooks.split(chapter, "torch"), notebooks.split(chapter, "mxnet")
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
    gpu = dict(run, machine="1 x NVIDIA H100 80GB HBM3", gpus=1)
    assert "1 x NVIDIA H100 80GB HBM3" in runinfo.run_note(gpu, "zh")
    assert "1 x NVIDIA H100 80GB HBM3" in runinfo.run_note(gpu, "en")


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
         "ladder.plot("),
        ("gluon.data.DataLoader(", "num_workers=", "hybridize(static_alloc=True",
         "MXNET_CUDNN_AUTOTUNE_DEFAULT", "use_bias=False", "d2l.train(",
         "lr_scheduler.CosineScheduler(")),
    "host-device-sync": (
        ("torch.nonzero(", "torch.unique(", "schedule(wait=1, warmup=2, active=3)",
         "record_function(", "prof.step()", "export_chrome_trace(", "key_averages().table(",
         "trace.load_trace(", "trace.plot_timeline(", "torch.where(", "torch.count_nonzero(",
         "ignore_index=IGNORE", 'set_sync_debug_mode("warn")', 'set_sync_debug_mode("error")'),
        ("np.unique(", "mx.profiler.set_config(", "mx.profiler.dump()", "np.where(",
         "trace.load_trace(")),
    "gpu-basics": (
        ("torch.accelerator.is_available()", "torch.cuda.get_device_properties(",
         "device=device", ".to(device)", "torch.cuda.memory_allocated(",
         "torch.cuda.memory_reserved(", "torch.cuda.empty_cache()",
         "torch.cuda.max_memory_allocated(", "torch.cuda.reset_peak_memory_stats(",
         "torch.cuda.mem_get_info(", ".pin_memory()", "non_blocking=True",
         "torch.cuda.Stream(", "side.wait_stream(main)", "A.record_stream(side)",
         'TORCH_CUDA_SANITIZER="1"', "trace.plot_timeline(", "replicate(module, devices)",
         "scatter(inputs, devices)", "parallel_apply(replicas, inputs)", "gather(outputs,",
         "nn.DataParallel(", ".share_memory_()", "net.share_memory()",
         'mp.get_context("spawn")'),
        ("mx.context.num_gpus()", "mx.gpu(i)", "mx.context.gpu_memory_info(", "ctx=device",
         ".as_in_ctx(device)", "list_ctx()", "mx.cpu_pinned(0)", "gluon.utils.split_and_load(",
         "p.list_grad()", 'mx.Context("cpu_shared", 0)')),
}


@pytest.mark.parametrize("name", sorted(SHOWN_CODE))
def test_the_page_shows_the_code_it_teaches(name):
    """Each tip's or fix's code is on the page, under its framework, not only in d2l_ext."""
    chapter = sources.parse(config.CHAPTERS / "en" / f"{name}.md")
    for framework, calls in zip(("torch", "mxnet"), SHOWN_CODE[name]):
        code = "\n".join(c.source for c in chapter.cells
                         if c.kind == "code" and c.framework in (None, framework))
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
