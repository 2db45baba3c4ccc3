"""The speed ladder: ResNet-18 on Fashion-MNIST made faster one switch at a time.

    .venv/bin/python benchmarks/speed_ladder.py [--epochs E] [--num-train N] [--num-test N]
        [--batch-size B] [--lr LR] [--amp bf16|fp16|none|auto] [--target ACC]
        [--rungs 0,1,4 | --list] [--[no-]recheck] [--device cpu|cuda] [--json PATH]

Runs the rungs of ``d2l_ext.ladder.make_ladder(B, LR, amp=AMP)`` that the device supports
(CUDA-only rungs are skipped on a CPU), each for ``--epochs`` epochs of which the first is a
warm-up, on the first ``--num-train`` images cut to a multiple of the largest batch (no
partial batches), and prints each rung's verdict against the rung it builds on (faster, no
clear gain, or slower and dropped: ranges compared, not medians), batch and steps per epoch,
seconds per epoch (median, min, max of the timed epochs), images per second, test accuracy,
the time to ``--target`` accuracy, the speed-up over the first rung (d2l's loop; none for the
algorithmic rung, which does other work) and the model FLOPs utilisation against the
matrix-product rate measured in the same run. ``--amp auto`` (default) times a training step
in float32 and in each 16-bit format the device has natively and keeps the autocast rung only
if one is not clearly slower (``ladder.choose_amp``): a CPU without bf16 instructions runs
bf16 many times slower. ``--recheck`` (default) runs the first systems rung again at the end:
the difference is the machine's drift. With ``--json`` the table is written stamped with the
machine; nothing is asserted.

The defaults follow chapter 3: on a GPU all 60,000 images, batch 256, 10 epochs, a target of
0.85; on a CPU, where an epoch of all the images takes half an hour or more, the chapter's
CPU size (the first 256 training and 256 test images, batch 32, 5 epochs, target 0.5).
``--rungs`` counts the rungs as ``--list`` shows them, the autocast rung included: with
``--amp auto`` it is replaced by the format chosen, or left out.
``D2L_SMOKE=1`` shrinks them to a quick run.
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


#: The defaults per kind of run (chapter 3's sizes): epochs, num_train, num_test, batch, target.
SIZES = {"smoke": (4, 16, 16, 4, 0.2), "cpu": (5, 256, 256, 32, 0.5),
         "gpu": (10, None, None, 256, 0.85)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, help="epochs per rung; the first is a warm-up "
                        "(at least 4; default: 10 on a GPU, 5 on a CPU)")
    parser.add_argument("--num-train", type=int,
                        help="first N training images (default: all 60,000 on a GPU, 256 on a "
                             "CPU), cut to a multiple of the largest batch")
    parser.add_argument("--num-test", type=int,
                        help="first N test images (default: all 10,000 on a GPU, 256 on a CPU)")
    parser.add_argument("--batch-size", type=int,
                        help="the base batch (default: d2l's 256 on a GPU, 32 on a CPU); the "
                             "algorithmic rung uses 4 times it")
    parser.add_argument("--lr", type=float, default=None,
                        help="the base learning rate (default: 0.1 scaled to the batch, "
                             "0.1 * batch / 256)")
    parser.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "none"],
                        help="the autocast rung's format (auto: measured; none: no such rung)")
    parser.add_argument("--target", type=float,
                        help="the test accuracy each rung's time is taken to (default: 0.85 "
                             "on a GPU, 0.5 on a CPU)")
    parser.add_argument("--rungs", help="comma-separated rung indices (default: all)")
    parser.add_argument("--list", action="store_true", help="list the rungs and stop")
    parser.add_argument("--recheck", action=argparse.BooleanOptionalAction, default=True,
                        help="run the first systems rung again at the end (the drift)")
    parser.add_argument("--device", help="cpu or cuda (default: the first GPU if any)")
    parser.add_argument("--json", help="also write the table here, stamped with the machine")
    args = parser.parse_args()

    from d2l_ext import ladder
    from d2l_ext import torch as d2l

    try:  # a GPU asked for on a machine without one fails here, clearly, not deep in torch
        device = d2l.as_device(args.device) if args.device else d2l.try_gpu()
    except (ValueError, RuntimeError) as err:
        raise SystemExit(f"--device {args.device}: {err}") from None
    kind = "smoke" if _record.smoke() else "gpu" if device.type == "cuda" else "cpu"
    for name, value in zip(("epochs", "num_train", "num_test", "batch_size", "target"),
                           SIZES[kind]):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.lr is None:
        args.lr = 0.1 * args.batch_size / 256
    # --rungs and --list count the rungs of the ladder with its autocast rung, whatever the
    # run then decides: that rung is replaced by the chosen format's, or left out if none.
    listed = ladder.make_ladder(args.batch_size, args.lr,
                                amp=args.amp if args.amp in ("bf16", "fp16") else "bf16")
    picked = pick(listed, args.rungs)  # fail early
    if args.list:
        notes = {"auto": " (its format chosen by measurement; left out if float32 is faster)",
                 "none": " (left out: --amp none)"}
        for i, rung in enumerate(listed):
            need = " (CUDA only)" if rung.needs_cuda else ""
            note = notes.get(args.amp, "") if "amp" in rung.change else ""
            print(f"{i:2d}  {rung.kind:11s}  {rung.name}{need}{note}  "
                  f"{ladder.switches(listed, i)}")
        return
    amp = None if args.amp == "none" else args.amp
    if amp == "auto":
        timings = ladder.amp_step_timings(device, args.batch_size)
        amp = ladder.choose_amp(timings)
        print("one training step: " + "; ".join(f"{name} {t.text('ms', 1)}"
                                                for name, t in timings.items())
              + f" -> autocast rung: {amp or 'none (float32 was clearly faster)'}")
    args.amp_chosen = amp
    amp_rung = next((r for r in ladder.make_ladder(args.batch_size, args.lr, amp=amp)
                     if "amp" in r.change), None)
    rungs = [amp_rung if "amp" in r.change else r for r in picked
             if amp_rung is not None or "amp" not in r.change]
    results = ladder.run(rungs, device, args.epochs, args.num_train, args.num_test,
                         recheck=args.recheck)
    size = f"{results[0].num_train} training images"
    print(f"\n{device}, {args.epochs} epochs per rung (the first a warm-up), {size}, "
          f"target accuracy {args.target}")
    print(ladder.table(results, args.target))
    skipped = [r.name for r in rungs if r not in ladder.applicable(rungs, device)]
    if skipped:
        print("needs a CUDA GPU, not run: " + "; ".join(skipped))
    if args.json:
        _record.save(args.json, "speed_ladder", "torch", vars(args), ladder.COLUMNS,
                     ladder.rows(results, args.target), ladder.FORMATS)


if __name__ == "__main__":
    main()
