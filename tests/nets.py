"""Tiny networks for the training tests, and the checks every training run must pass.

They live in a module (not in a test function) so that the processes that
``d2l_ext.torch.train`` spawns can unpickle them. The frameworks are imported
inside the factories: importing this module imports neither.
"""


def tiny_torch_cnn():
    """Conv(8) + BatchNorm + ReLU + 4x4 max-pool + Linear: about 4,000 parameters."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(4), nn.Flatten(), nn.Linear(8 * 7 * 7, 10))


def linear_torch_net():
    """Softmax regression: no BatchNorm, so one SGD step is easy to compute by hand.

    Its buffer ``shared_seen`` becomes 1 if it is ever trained while its parameters
    live in shared memory (i.e. shared with other processes).
    """
    import torch
    from torch import nn

    net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
    net.register_buffer("shared_seen", torch.zeros(()))
    net.register_forward_pre_hook(_record_shared_memory)
    return net


def _record_shared_memory(module, args) -> None:
    if module.training and any(p.is_shared() for p in module.parameters()):
        module.shared_seen.fill_(1)


class _FailingRank:
    """Forward of softmax regression that fails on rank 1 at its third training step."""

    def __init__(self, how: str) -> None:
        self.how, self.steps = how, 0

    def __call__(self, module, args) -> None:
        import os
        import signal
        import time

        import torch
        import torch.distributed as dist

        if not (module.training and dist.is_initialized() and dist.get_rank() == 1):
            return
        self.steps += 1
        if self.steps < 3:
            return
        if self.how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.how == "out of memory":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated by the test)")
        elif self.how == "stuck":
            time.sleep(3600)


def failing_torch_net(how: str):
    """Softmax regression whose rank 1 gets ``"killed"``, runs ``"out of memory"`` or is
    ``"stuck"`` at its third training step (in a multi-process ``train``)."""
    from torch import nn

    net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
    net.register_forward_pre_hook(_FailingRank(how))
    return net


def tiny_mxnet_cnn():
    """The same network in Gluon (shapes are inferred on the first forward pass)."""
    from mxnet.gluon import nn

    net = nn.Sequential()
    net.add(nn.Conv2D(8, kernel_size=3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            nn.MaxPool2D(pool_size=4), nn.Dense(10))
    return net


def tiny_mxnet_hybrid_cnn():
    """The same network built of hybrid blocks, so that ``hybridize()`` compiles it."""
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, kernel_size=3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            nn.MaxPool2D(pool_size=4), nn.Dense(10))
    return net


def linear_mxnet_net():
    """Softmax regression in Gluon."""
    from mxnet.gluon import nn

    net = nn.Sequential()
    net.add(nn.Dense(10))
    return net


def assert_learned(result, num_epochs: int, printed: list[str]) -> None:
    """``result`` has ``num_epochs`` of every measure, beat chance, and was printed."""
    for values in (result.train_loss, result.train_acc, result.test_acc,
                   result.epoch_seconds, result.images_per_second):
        assert len(values) == num_epochs
    assert result.test_acc[-1] > 0.2  # chance is 0.1
    assert result.train_loss[-1] < result.train_loss[0]
    assert [line.split(":")[0] for line in printed[:num_epochs]] == [
        f"epoch {i + 1}" for i in range(num_epochs)]
    assert printed[-1] == result.summary()
