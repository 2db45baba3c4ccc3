"""Seconds per epoch, images per second and test accuracy of ResNet-18 on 1..N devices.

    .venv/bin/python benchmarks/multi_device.py [--framework torch|mxnet] [--epochs E]
        [--batch-per-device B] [--num-train N] [--num-test N] [--max-devices K] [--json PATH]

Runs one device, then 2, 4, ... up to all GPUs (each with a fresh network, the batch
growing with the device count, d2l's learning rate of 0.1 per 256 images scaled linearly
with it, and a warm-up). On a machine without GPUs it runs one CPU and two CPU stand-ins
(processes for PyTorch, contexts for MXNet): that pair checks correctness, not speed. On a
machine with GPUs only GPU rows run, so that every row does the same work. Prints one
table and, with ``--json``, writes it stamped with the machine; nothing is asserted.
``D2L_SMOKE=1`` shrinks the defaults to a quick run.
"""

from __future__ import annotations

import argparse

import _record


def device_counts(num_gpus: int, max_devices: int | None) -> list[int]:
    """1, 2, 4, ... up to the number of GPUs; 1 and 2 (CPU stand-ins) without GPUs."""
    top = num_gpus or 2
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
    small = _record.smoke()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "mxnet"], default="torch")
    parser.add_argument("--epochs", type=int, default=1 if small else 3)
    parser.add_argument("--batch-per-device", type=int, default=32 if small else 256)
    parser.add_argument("--num-train", type=int, default=256 if small else None,
                        help="first N training images (default: all)")
    parser.add_argument("--num-test", type=int, default=256 if small else None,
                        help="first N test images (default: all)")
    parser.add_argument("--max-devices", type=int)
    parser.add_argument("--json", help="also write the table here, stamped with the machine")
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
        ips = result.images_per_second[1:] or result.images_per_second
        rows.append([result.device_names(), result.test_acc[-1], result.sec_per_epoch,
                     sum(ips) / len(ips)])
        print(f"done: {rows[-1][0]}", flush=True)
    columns = ["devices", "test acc", "sec/epoch", "images/sec"]
    formats = ["", ".3f", ".2f", ".0f"]
    print(f"\n{args.framework}, {gpus} GPU(s), {args.epochs} epochs, "
          f"{args.batch_per_device} images per device and step")
    print(_record.table(columns, rows, formats))
    if not gpus:
        print("(no GPU: the two-device row ran on CPU stand-ins)")
    if args.json:
        _record.save(args.json, "multi_device", args.framework, vars(args), columns, rows,
                     formats)


if __name__ == "__main__":
    main()
