"""Seconds per epoch, images per second and test accuracy of ResNet-18 on 1..N devices.

    .venv/bin/python benchmarks/multi_device.py [--framework torch|mxnet] [--epochs E]
        [--num-train N] [--max-devices K]

Runs one device, then 2, 4, ... up to all GPUs (each with a fresh network, the batch
growing with the device count, d2l's learning rate of 0.1 per 256 images scaled linearly
with it, and a warm-up). Without two GPUs it adds
a run on two CPU stand-ins (processes for PyTorch, contexts for MXNet): that run checks
correctness, not speed. Prints one table; nothing is asserted.
"""

from __future__ import annotations

import argparse


def device_counts(num_gpus: int, max_devices: int | None) -> list[int]:
    """1, 2, 4, ... up to the number of GPUs (at least 1 and 2)."""
    top = max(num_gpus, 2)
    if max_devices:
        top = min(top, max_devices)
    counts, k = [1], 2
    while k <= top:
        counts.append(k)
        k *= 2
    if counts[-1] != top:
        counts.append(top)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "mxnet"], default="torch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-per-device", type=int, default=256)
    parser.add_argument("--num-train", type=int, help="first N training images (default: all)")
    parser.add_argument("--num-test", type=int, help="first N test images (default: all)")
    parser.add_argument("--max-devices", type=int)
    args = parser.parse_args()
    if args.framework == "torch":
        from d2l_ext import torch as d2l
    else:
        from d2l_ext import mxnet as d2l

    gpus = d2l.num_gpus()
    rows = []
    for k in device_counts(gpus, args.max_devices):
        devices = [d2l.try_gpu()] if k == 1 else d2l.try_all_devices(k)[:k]
        batch_size = args.batch_per_device * k
        lr = 0.1 * batch_size / 256  # d2l's rate for 256 images, scaled linearly
        result = d2l.train(d2l.resnet18(10), devices, batch_size, lr,
                           args.epochs, warmup_epochs=args.epochs / 10,
                           num_train=args.num_train, num_test=args.num_test, verbose=False)
        ips = sum(result.images_per_second[1:] or result.images_per_second)
        ips /= len(result.images_per_second[1:] or result.images_per_second)
        rows.append((result.device_names(), result.test_acc[-1], result.sec_per_epoch, ips))
        print(f"done: {rows[-1][0]}", flush=True)
    print(f"\n{args.framework}, {gpus} GPU(s), {args.epochs} epochs, "
          f"{args.batch_per_device} images per device and step")
    width = max(len("devices"), *(len(row[0]) for row in rows))
    print(f"{'devices':>{width}} {'test acc':>9} {'sec/epoch':>10} {'images/sec':>11}")
    for name, acc, sec, ips in rows:
        print(f"{name:>{width}} {acc:9.3f} {sec:10.1f} {ips:11.0f}")
    if gpus < 2:
        print("(fewer than two GPUs: the multi-device rows ran on CPU stand-ins)")


if __name__ == "__main__":
    main()
