"""What the tuning chapter's pages share (d2l_ext.tuning_setup)."""

from __future__ import annotations

import pytest

from d2l_ext import gpu_runs, tuning_setup
from d2l_ext.i18n import message


def test_sizes_per_kind_of_run():
    """A GPU takes all the images and d2l's batch of 256 at d2l's rate; a CPU a slice, a
    batch of 32 with the rate scaled alike; a smoke run is tiny whatever the device."""
    gpu = tuning_setup.sizes("cuda")
    assert (gpu.num_train, gpu.num_test, gpu.batch_size, gpu.lr) == (None, None, 256, 0.1)
    assert gpu.batches[-1] == 1024 and gpu.batch_size in gpu.batches
    cpu = tuning_setup.sizes("cpu")
    assert (cpu.num_train, cpu.num_test, cpu.batch_size) == (1_024, 512, 32)
    assert cpu.lr == pytest.approx(0.1 * 32 / 256)
    assert cpu.batches[-1] == cpu.batch_size  # the ladder's batch is the largest timed
    assert tuning_setup.sizes("gpu") == gpu  # MXNet's name for a GPU counts as one
    for device_type in ("cpu", "cuda"):
        smoke = tuning_setup.sizes(device_type, smoke=True)
        assert smoke.num_train == 64 and smoke.batches == [2, 4, 8] and smoke.rounds == 2
    for sizes in (gpu, cpu):
        assert len(sizes.batches) >= 3  # the pages take small and large = batches[-3], [-1]
        assert sizes.batches == sorted(sizes.batches)
    # the pages' prose quotes these (tuning-tips.md, tuning-tips-ladder.md: "The sizes")
    assert (gpu.rounds, gpu.steps, gpu.target, gpu.seeds, gpu.max_epochs, gpu.scales) == \
        (5, 30, 0.90, 2, 8, (4, 8))
    assert (cpu.rounds, cpu.steps, cpu.target, cpu.seeds, cpu.max_epochs, cpu.scales) == \
        (5, 4, 0.5, 2, 4, (4,))
    assert gpu.batches == [16, 32, 64, 128, 256, 512, 1024]
    assert cpu.batches == [1, 2, 4, 8, 16, 32]


def test_torch_training_steps_the_network_it_holds_or_the_one_given():
    torch = pytest.importorskip("torch")
    device = torch.device("cpu")
    training = tuning_setup.torch_training(device, lr=0.1)
    X, y = tuning_setup.torch_random_batch(2, device)
    assert X.shape == (2, 1, 28, 28) and y.shape == (2,) and int(y.max()) < 10
    before = [p.detach().clone() for p in training.net.parameters()]
    training.step(X, y)
    assert any(not torch.equal(b, p) for b, p in zip(before, training.net.parameters()))
    other = tuning_setup.torch_training(device, lr=0.0)  # the same weights: the same seed
    fresh = tuning_setup.torch_training(device, lr=0.1)
    assert all(torch.equal(a, b) for a, b in zip(before, other.net.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.net.parameters()))
    same = [p.detach().clone() for p in other.net.parameters()]
    training.step(X, y, other.net, other.optimizer)  # a rate of 0 moves nothing
    assert all(torch.equal(b, p) for b, p in zip(same, other.net.parameters()))


def test_mxnet_training_steps_the_network(numpy_too_new):
    if numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    mx = pytest.importorskip("mxnet")
    mx.npx.set_np()
    device = mx.cpu()
    training = tuning_setup.mxnet_training(device, lr=0.1)
    weight = training.net[0].weight.data().copy()  # drawn already: no deferred initialisation
    mx.np.random.uniform(size=(1000,))  # a draw in between changes nothing
    again = tuning_setup.mxnet_net(device)
    assert float(mx.np.abs(again[0].weight.data() - weight).max()) == 0
    X, y = tuning_setup.mxnet_random_batch(2, device)
    assert X.shape == (2, 1, 28, 28) and y.shape == (2,)
    training.step(X, y)
    assert float(mx.np.abs(training.net[0].weight.data() - weight).max()) > 0
    # another network with its own trainer at rate 0: the probe's step moves nothing
    probe = tuning_setup.mxnet_training(device, lr=0.0)
    start = probe.net[0].weight.data().copy()
    training.step(X, y, probe.net, probe.trainer)
    assert float(mx.np.abs(probe.net[0].weight.data() - start).max()) == 0


def _record(figures):
    return gpu_runs.GpuRun(chapter="p", run={"gpus": 1, "gpu": "NVIDIA H100", "date": "2026-01-02"},
                           commit="abc", code_version="v",
                           figures=tuple(gpu_runs.Figure(en, en, v, "") for en, v in figures))


def test_kept_run_reads_figures_by_short_name():
    names = {"rate": message(en="rate (GB/s)", zh="速率"), "batch": message(en="batch", zh="批量")}
    kept = tuning_setup.KeptRun(_record([("rate (GB/s)", 3.5)]), names)
    assert kept.get("rate") == 3.5
    assert kept.get("batch") is None and kept.get("unknown") is None
    assert kept.all("rate") == [3.5] and kept.all("rate", "batch") is None
    assert kept.where().en == "1 × NVIDIA H100, 2026-01-02"
    assert kept.where().zh == "1 块 NVIDIA H100，2026-01-02"
    assert tuning_setup.KeptRun(None, names).all("rate") is None
    with pytest.raises(ValueError, match="no GPU run"):
        tuning_setup.KeptRun(None, names).where()


def test_an_empty_container_given_as_the_network_is_used_not_replaced():
    """``step(X, y, net)`` takes the network given even when it is falsy (an empty
    Sequential has length 0): the held one is used only when none is given."""
    torch = pytest.importorskip("torch")
    training = tuning_setup.torch_training(torch.device("cpu"), lr=0.1)
    X, y = tuning_setup.torch_random_batch(2, torch.device("cpu"))
    with pytest.raises(Exception):  # noqa: B017 - an empty network cannot produce scores
        training.step(X, y, torch.nn.Sequential(), training.optimizer)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_plot_lr_draws_each_schedule_with_its_legend_and_labelled_axes(lang, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from d2l_ext import i18n

    monkeypatch.setenv("D2L_LANG", lang)
    ax = tuning_setup.plot_lr({"constant": [0.1, 0.2, 0.2], "gluon cosine": [0.1, 0.2, 0.0],
                               "my own": [0.0, 0.1, 0.1]})
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [
        [0.1, 0.2, 0.2], [0.1, 0.2, 0.0], [0.0, 0.1, 0.1]]
    chinese = lang == "zh" and i18n.cjk_font() is not None and i18n.capture_dir() is None
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == (["恒定", "余弦（Gluon）", "my own"] if chinese
                      else ["constant", "cosine (Gluon)", "my own"])
    assert ax.get_xlabel() == ("步" if chinese else "step")
    assert ax.get_ylabel() == ("学习率" if chinese else "learning rate")
    assert i18n.LABELS["learning rate"] == "学习率"  # the zh rendering of an English figure
    plt.close(ax.figure)


def test_signed_writes_a_true_minus_sign():
    """Negative numbers in printed text take U+2212, not a hyphen; positive ones keep '+'."""
    assert tuning_setup.signed(-0.033, "+.1%") == "\u22123.3%"
    assert tuning_setup.signed(5.21, "+.1f") == "+5.2"
    assert tuning_setup.signed(-5.2) == "\u22125.2"
    assert tuning_setup.signed(12.0, ".3g") == "12"


def test_signed_drops_the_sign_of_a_value_that_prints_as_zero():
    assert tuning_setup.signed(-0.0004, "+.0%") == "0%"
    assert tuning_setup.signed(0.0, "+.3f") == "0.000"
    assert tuning_setup.signed(-0.0, "+.1f") == "0.0"
    assert tuning_setup.signed(-0.006, "+.2f") == "\u22120.01"
    assert tuning_setup.signed(3e-9, "+.1e") == "+3.0e\u221209"
