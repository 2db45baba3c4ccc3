"""The speed ladder: ResNet-18 on Fashion-MNIST made faster one switch at a time.

    .venv/bin/python benchmarks/speed_ladder.py [--rounds R] [--steps K] [--num-train N]
        [--num-test N] [--batch-size B] [--lr LR] [--amp bf16|fp16|none|auto]
        [--target ACC] [--seeds S] [--max-epochs E] [--no-target] [--rungs 0,1,4 | --list]
        [--device cpu|cuda] [--warm-cache] [--json PATH]

Runs the rungs of ``d2l_ext.ladder.make_ladder(B, LR, amp=AMP)`` that the device supports
(CUDA-only rungs are skipped on a CPU) with the ladder's method (``ladder.run``): every rung
built and warmed up first (its one-off cost timed apart: workers, compilation, autotuning,
CUDA graph recording), then ``--rounds`` rounds in which every rung runs a unit in turn (a
whole epoch for the rungs whose loader works in epochs, ``--steps`` steps for the others);
each systems rung judged by its per-round ratio to the rung below it; every step split into
the device's time, the host's time and the wall time; MFU against one fixed peak (the GPU's
dense bf16 datasheet peak, or on a CPU the fastest matrix product measured). Then the time
to ``--target`` test accuracy (``ladder.time_to_target``) of d2l's loop, the top systems rung
and the algorithmic rungs, from ``--seeds`` seeds each, the accuracy read every quarter
epoch, training time and one-off time apart. ``--amp auto`` (default) times a training step
in float32 and in each 16-bit format the device has natively, in the configuration of the
rung that adds autocast, and prefers bf16 unless fp16 is clearly and notably faster
(``ladder.choose_amp``). With ``--json`` every rung's timings per round, its split, one-off
cost and compiler record, and the time-to-target runs are written, stamped with the machine;
nothing is asserted. A GPU runner executes this in a fresh process; we size it for about
6 minutes on one H100, an estimate from the earlier ladder's H100 run (the current one has
not yet run on a GPU).

The defaults: on a GPU all 60,000 images, d2l's batch 256, 5 rounds of 30 steps, a target
of 0.90 within 8 epochs from 2 seeds; on a CPU the first 1,024 training and 512 test images,
batch 32, 5 rounds of 4 steps, a target of 0.5. ``--rungs`` counts the rungs as ``--list``
shows them, the autocast rung included: with ``--amp auto`` it is replaced by the format
chosen, or left out. The compilers' on-disk caches start empty (a temporary directory, removed
at the end), so that a compiled rung's one-off cost is a first compilation; ``--warm-cache``
keeps this machine's caches. ``D2L_SMOKE=1`` shrinks everything to a quick run.
"""

from __future__ import annotations

import argparse
import dataclasses

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


#: The defaults per kind of run: rounds, steps per round, num_train, num_test, batch,
#: target accuracy, seeds, most epochs to the target.
SIZES = {"smoke": (2, 2, 64, 64, 8, 0.2, 1, 1),
         "cpu": (5, 4, 1_024, 512, 32, 0.5, 2, 4),
         "gpu": (5, 30, None, None, 256, 0.90, 2, 8)}
NAMES = ("rounds", "steps", "num_train", "num_test", "batch_size", "target", "seeds",
         "max_epochs")


def _split(split) -> dict | None:
    if split is None:
        return None
    return {"device": list(split.device.times), "host": list(split.host.times),
            "wall": list(split.wall.times), "bound": "sync" if split.syncs else split.bound}


def _rung(result) -> dict:
    return {"name": result.name.en, "kind": result.kind, "options": result.options,
            "steps_per_epoch": result.steps_per_epoch, "step_seconds": result.step_seconds,
            "ratios": result.ratios, "verdict": result.verdict, "one_off": result.one_off,
            "warmup_steps": result.warmup_steps, "split": _split(result.split),
            "flops_per_step": result.flops_per_step, "compiled_in_window":
            sorted(set(result.compiled_in_window)), "error": result.error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="rounds of every rung in turn (>= 2)")
    parser.add_argument("--steps", type=int, help="steps per round of a rung whose data is on "
                        "the device (loader rungs run a whole epoch)")
    parser.add_argument("--num-train", type=int, help="first N training images (default: all "
                        "on a GPU, 1,024 on a CPU), cut to a multiple of the largest batch")
    parser.add_argument("--num-test", type=int, help="first N test images")
    parser.add_argument("--batch-size", type=int, help="the base batch (default: 256 on a GPU, "
                        "32 on a CPU); the algorithmic rungs use 4 and 8 times it")
    parser.add_argument("--lr", type=float, default=None,
                        help="the base learning rate (default: 0.1 * batch / 256)")
    parser.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "none"],
                        help="the autocast rung's format (auto: measured; none: no such rung)")
    parser.add_argument("--target", type=float, help="the test accuracy to reach")
    parser.add_argument("--seeds", type=int, help="runs to the target per rung")
    parser.add_argument("--max-epochs", type=int, help="most epochs of a run to the target")
    parser.add_argument("--no-target", action="store_true", help="skip the time to target")
    parser.add_argument("--rungs", help="comma-separated rung indices (default: all)")
    parser.add_argument("--list", action="store_true", help="list the rungs and stop")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep Inductor's and Triton's on-disk caches (default: empty ones, "
                             "so that the one-off costs are those of a first compilation)")
    parser.add_argument("--device", help="cpu or cuda (default: the first GPU if any)")
    parser.add_argument("--json", help="also write the results here, stamped with the machine")
    args = parser.parse_args()
    if not args.warm_cache:  # before torch is imported: its compilers read these once
        import atexit
        import os
        import shutil
        import tempfile

        cold = tempfile.mkdtemp(prefix="speed-ladder-cache-")
        atexit.register(shutil.rmtree, cold, ignore_errors=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cold, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cold, "triton")

    from d2l_ext import ladder
    from d2l_ext import torch as d2l

    try:  # a GPU asked for on a machine without one fails here, clearly, not deep in torch
        device = d2l.as_device(args.device) if args.device else d2l.try_gpu()
    except (ValueError, RuntimeError) as err:
        raise SystemExit(f"--device {args.device}: {err}") from None
    kind = "smoke" if _record.smoke() else "gpu" if device.type == "cuda" else "cpu"
    for name, value in zip(NAMES, SIZES[kind]):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.lr is None:
        args.lr = 0.1 * args.batch_size / 256
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
    amp_record = {}
    if amp == "auto":
        runnable = ladder.applicable(listed, device)
        index = next(i for i, r in enumerate(runnable) if "amp" in r.change)
        config = {k: v for k, v in ladder.options(runnable, index).items()
                  if k in ("channels_last", "bias", "cudnn_benchmark", "tf32")}
        timings = ladder.amp_step_timings(device, args.batch_size, config)
        amp = ladder.choose_amp(timings)
        backends = {name: ladder.batchnorm_backend(device, None if name == "fp32" else name,
                                                   config.get("channels_last", False))
                    for name in timings}
        amp_record = {"config": config, "chosen": amp, "backends": backends,
                      "timings": {name: list(t.times) for name, t in timings.items()}}
        print("one training step: " + "; ".join(
            f"{name} {t.text('ms', 2)} (BatchNorm: {backends[name]})"
            for name, t in timings.items())
              + f" -> autocast rung: {amp or 'none (float32 was clearly faster)'}")
    args.amp_chosen = amp
    made = ladder.make_ladder(args.batch_size, args.lr, amp=amp)
    amp_rung = next((r for r in made if "amp" in r.change), None)
    rungs = [amp_rung if "amp" in r.change else r for r in picked
             if amp_rung is not None or "amp" not in r.change]
    rungs = [r for r in rungs if r.name in {m.name for m in made}]  # capture: not with fp16
    peak, peak_text, is_mfu = ladder.peak_flops(device)
    print(f"{'MFU' if is_mfu else 'share of the reference rate'} against {peak_text.en}")
    results = ladder.run(rungs, device, args.rounds, args.steps, args.num_train,
                         args.num_test, peak=(peak, peak_text))
    print(f"\n{device}, {args.rounds} rounds, {args.steps} steps a round (loader rungs: a "
          f"whole epoch), false-alarm chance of a verdict {ladder.false_alarm(args.rounds):.1%}")
    print(ladder.table(results, datasheet=is_mfu))
    skipped = [r.name for r in rungs if r not in ladder.applicable(rungs, device)]
    if skipped:
        print("needs a CUDA GPU, not run: " + "; ".join(skipped))
    targets = []
    if not args.no_target:
        measured = ladder.applicable(rungs, device)
        kept = {r.name.en for r in results if not r.error}
        systems = [i for i, r in enumerate(measured) if r.kind == "systems" and r.name in kept]
        chosen = ([i for i, r in enumerate(measured) if r.kind == "reference"]
                  + systems[-1:] + [i for i, r in enumerate(measured)
                                    if r.kind == "algorithmic"])
        targets = ladder.time_to_target(measured, chosen, device, args.target,
                                        seeds=tuple(range(args.seeds)),
                                        max_epochs=args.max_epochs, num_train=args.num_train,
                                        num_test=args.num_test)
        print(ladder.target_table(targets, args.target))
    if args.json:
        table_rows = [[None if type(v).__name__ == "_Blank" else
                       (v.en if hasattr(v, "en") else v) for v in row]
                      for row in ladder.rows(results)]
        _record.save(args.json, "speed_ladder", "torch", vars(args),
                     [c.en for c in ladder.COLUMNS], table_rows, ladder.FORMATS, extra={
            "peak": {"flops": peak, "what": peak_text.en, "datasheet": is_mfu},
            "amp": amp_record,
            "rungs": [_rung(r) for r in results],
            "targets": [dict(dataclasses.asdict(t), name=t.name.en) for t in targets]})


if __name__ == "__main__":
    main()
