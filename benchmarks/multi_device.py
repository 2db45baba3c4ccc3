"""Seconds per epoch, images per second and test accuracy of ResNet-18 on 1..N devices.

    .venv/bin/python benchmarks/multi_device.py [--framework torch|mxnet] [--epochs E]
        [--num-train N] [--max-devices K]

Runs one device, then 2, 4, ... up to all GPUs (each with a fresh network, the batch and
the learning rate scaled with the device count, and a warm-up). Without two GPUs it adds
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
        result = d2l.train(d2l.resnet18(10), devices, args.batch_per_device * k, 0.1 * k,
                           args.epochs, warmup_epochs=args.epochs / 10,
                           num_train=args.num_train, num_test=args.num_test, verbose=False)
        ips = sum(result.images_per_second[1:] or result.images_per_second)
        ips /= len(result.images_per_second[1:] or result.images_per_second)
        rows.append((f"{k} x {devices[0]}", result.test_acc[-1], result.sec_per_epoch, ips))
        print(f"done: {rows[-1][0]}", flush=True)
    print(f"\n{args.framework}, {gpus} GPU(s), {args.epochs} epochs, "
          f"{args.batch_per_device} images per device and step")
    print(f"{'devices':>14} {'test acc':>9} {'sec/epoch':>10} {'images/sec':>11}")
    for name, acc, sec, ips in rows:
        print(f"{name:>14} {acc:9.3f} {sec:10.1f} {ips:11.0f}")
    if gpus < 2:
        print("(fewer than two GPUs: the multi-device rows ran on CPU stand-ins)")


if __name__ == "__main__":
    main()
