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


@pytest.mark.parametrize("variant, syncs", [("original", 5), ("where", 4), ("sort", 3),
                                            ("ignore_index", 0)])
def test_each_variant_synchronises_as_often_as_documented(variant, syncs):
    """A training step's operators that need a size from the device (nonzero, also inside
    boolean indexing and its backward; unique), counted in a CPU profile: the same operators
    wait for the device on a GPU."""
    pred = torch.randn(2, 10, 8, 8, requires_grad=True)
    _, labels = segmentation.random_batch(2, size=8, seed=4)
    loss_fn = MaskedCrossEntropy(variant)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss_fn(pred, labels).backward()
    names = [e.name for e in prof.events()]
    assert names.count("aten::nonzero") + names.count("aten::_unique2") == syncs
    row = re.search(rf'^``"{variant}"``.* (\d+)$', segmentation.__doc__, re.M)
    assert row and int(row.group(1)) == syncs, "the module's table says otherwise"
