"""The speed ladder: ResNet-18 on Fashion-MNIST made faster one switch at a time.

    .venv/bin/python benchmarks/speed_ladder.py [--epochs E] [--num-train N] [--num-test N]
        [--batch-size B] [--lr LR] [--rungs 0,1,4 | --list] [--[no-]recheck]
        [--device cpu|cuda] [--json PATH]

Runs the rungs of ``d2l_ext.ladder.make_ladder(B, LR)`` that the device supports (CUDA-only
rungs are skipped on a CPU), each for ``--epochs`` epochs of which the first is a warm-up,
on the first ``--num-train`` images cut to a multiple of the largest batch (no partial
batches), and prints each rung's verdict (faster, no clear gain, or slower and dropped:
ranges compared, not medians), batch and steps per epoch, seconds per epoch (median, min,
max of the timed epochs), images per second, test accuracy, the speed-up over the first
rung (d2l's loop) and the model FLOPs utilisation against the matrix-product rate measured
in the same run. ``--recheck`` (default) runs the first systems rung again at the end: the
difference is the machine's drift. With ``--json`` the table is written stamped with the
machine; nothing is asserted. ``D2L_SMOKE=1`` shrinks the defaults to a quick run.
"""

from __future__ import annotations

import argparse

import _record


def pick(rungs, spec: str | None):
    """The rungs named by ``spec``: comma-separated indices into the ladder (all if None)."""
    if spec is None:
        return list(rungs)
    try:
        indices = [int(i) for i in spec.split(",")]
        return [rungs[i] for i in indices]
    except (ValueError, IndexError):
        raise SystemExit(f"--rungs {spec!r}: give comma-separated indices from 0 to "
                         f"{len(rungs) - 1} (see --list).") from None


def main() -> None:
    small = _record.smoke()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4 if small else 10,
                        help="epochs per rung; the first is a warm-up (at least 4)")
    parser.add_argument("--num-train", type=int, default=16 if small else None,
                        help="first N training images (default: all 60,000), cut to a "
                             "multiple of the largest batch")
    parser.add_argument("--num-test", type=int, default=16 if small else None,
                        help="first N test images (default: all 10,000)")
    parser.add_argument("--batch-size", type=int, default=4 if small else 256,
                        help="the base batch (d2l's 256); the algorithmic rung uses 4 times it")
    parser.add_argument("--lr", type=float, default=None,
                        help="the base learning rate (default: 0.1 scaled to the batch, "
                             "0.1 * batch / 256)")
    parser.add_argument("--rungs", help="comma-separated rung indices (default: all)")
    parser.add_argument("--list", action="store_true", help="list the rungs and stop")
    parser.add_argument("--recheck", action=argparse.BooleanOptionalAction, default=True,
                        help="run the first systems rung again at the end (the drift)")
    parser.add_argument("--device", help="cpu or cuda (default: the first GPU if any)")
    parser.add_argument("--json", help="also write the table here, stamped with the machine")
    args = parser.parse_args()
    if args.lr is None:
        args.lr = 0.1 * args.batch_size / 256

    import torch

    from d2l_ext import ladder
    from d2l_ext import torch as d2l

    all_rungs = ladder.make_ladder(args.batch_size, args.lr)
    if args.list:
        for i, rung in enumerate(all_rungs):
            need = " (CUDA only)" if rung.needs_cuda else ""
            print(f"{i:2d}  {rung.kind:11s}  {rung.name}{need}  {rung.change}")
        return
    device = torch.device(args.device) if args.device else d2l.try_gpu()
    rungs = pick(all_rungs, args.rungs)
    results = ladder.run(rungs, device, args.epochs, args.num_train, args.num_test,
                         recheck=args.recheck)
    size = f"{results[0].num_train} training images"
    print(f"\n{device}, {args.epochs} epochs per rung (the first a warm-up), {size}")
    print(ladder.table(results))
    skipped = [r.name for r in rungs if r not in ladder.applicable(rungs, device)]
    if skipped:
        print("needs a CUDA GPU, not run: " + "; ".join(skipped))
    if args.json:
        _record.save(args.json, "speed_ladder", "torch", vars(args), ladder.COLUMNS,
                     ladder.rows(results), ladder.FORMATS)


if __name__ == "__main__":
    main()
