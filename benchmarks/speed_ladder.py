"""The speed ladder: ResNet-18 on Fashion-MNIST made faster one switch at a time.

    .venv/bin/python benchmarks/speed_ladder.py [--epochs E] [--num-train N] [--num-test N]
        [--rungs 0,1,4 | --list] [--[no-]probe] [--device cpu|cuda] [--json PATH]

Runs the rungs of ``d2l_ext.ladder.LADDER`` that the device supports (CUDA-only rungs are
skipped on a CPU), each for ``--epochs`` epochs of which the first is a warm-up, and prints
seconds per epoch (median, min, max of the timed epochs), images per second, test accuracy,
the speed-up over the first rung (d2l's loop) and the model FLOPs utilisation against the
matrix-product rate measured in the same run, and what bounds each rung (overhead, memory
or compute: is a step at four times the batch four times as long?). With ``--json`` the
table is written stamped with the machine; nothing is asserted. ``D2L_SMOKE=1`` shrinks
the defaults to a quick run.
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
    parser.add_argument("--num-train", type=int, default=256 if small else None,
                        help="first N training images (default: all 60,000)")
    parser.add_argument("--num-test", type=int, default=256 if small else None,
                        help="first N test images (default: all 10,000)")
    parser.add_argument("--rungs", help="comma-separated rung indices (default: all)")
    parser.add_argument("--list", action="store_true", help="list the rungs and stop")
    parser.add_argument("--probe", action=argparse.BooleanOptionalAction, default=None,
                        help="also time each rung at a quarter of its batch, for the 'bound' "
                             "column (default: on a GPU only)")
    parser.add_argument("--device", help="cpu or cuda (default: the first GPU if any)")
    parser.add_argument("--json", help="also write the table here, stamped with the machine")
    args = parser.parse_args()

    import torch

    from d2l_ext import ladder
    from d2l_ext import torch as d2l

    if args.list:
        for i, rung in enumerate(ladder.LADDER):
            need = " (CUDA only)" if rung.needs_cuda else ""
            print(f"{i:2d}  {rung.kind:11s}  {rung.name}{need}  {rung.change}")
        return
    device = torch.device(args.device) if args.device else d2l.try_gpu()
    rungs = pick(ladder.LADDER, args.rungs)
    results = ladder.run(rungs, device, args.epochs, args.num_train, args.num_test,
                         probe=args.probe)
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
