"""Train d2l's ResNet-18 on Fashion-MNIST for one epoch and print accuracy and speed.

    .venv/bin/python tools/demo.py [--framework torch|mxnet] [--devices N] [--full]

On a GPU it uses the whole data set; on a CPU only a slice (``--full`` for all),
because one full epoch there takes a quarter of an hour or more.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "mxnet"], default="torch")
    parser.add_argument("--devices", type=int, default=1, help="devices to train on")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="all 60,000 images even on a CPU")
    args = parser.parse_args()
    if args.framework == "torch":
        from d2l_ext import torch as d2l
    else:
        from d2l_ext import mxnet as d2l

    on_gpu = d2l.num_gpus() > 0
    devices = d2l.try_all_devices(args.devices) if args.devices > 1 else [d2l.try_gpu()]
    devices = devices[: args.devices]
    sizes = {} if on_gpu or args.full else {"num_train": 2000, "num_test": 2000}
    if sizes:
        print("No GPU: training on the first 2,000 images and testing on 2,000 (--full for all).")
    per_device = 256 if not sizes else 32  # more steps when only a slice is used
    batch_size = per_device * len(devices)
    lr = 0.1 * batch_size / 256  # d2l's rate for 256 images, scaled linearly with the batch
    start = time.perf_counter()
    result = d2l.train(d2l.resnet18(10), devices, batch_size, lr, args.epochs,
                       warmup_epochs=0.2, **sizes)
    print(f"{args.framework}: {result.summary()} (whole run {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
