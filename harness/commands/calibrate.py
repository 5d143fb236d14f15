"""steptrace calibrate --out FILE.csv: time the engine's own ops on the device at hand over a
grid of shapes, and write them as a kernel table (engine/kernels/table.py; docs/calibrate.md).

Under torchrun (WORLD_SIZE > 1) every rank times all_reduce and all_gather, and rank 0 the
rest; rank 0 alone writes the table and prints the result.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

from engine.devices.detect import REQUESTS
from fileio.atomic import NotAnOutputFile, check_output

from ..errors import BadInput, RunFailed
from .common import add_json, print_json

TOKENS_MAX = 1 << 20
REPEATS_MAX = 10_000
CONTEXT_MAX = 1 << 24
DEFAULT_CONTEXTS = "512,2048,8192"
BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}  # torch.distributed's, by device


def add(p) -> None:
    p.add_argument("--out", required=True, type=Path, metavar="FILE.csv",
                   help="the kernel table to write (replaced whole, or left as it was)")
    p.add_argument("--model", default="tiny",
                   help="a bundled model (engine/models/NAME.yaml) or a model YAML file: its "
                        "geometry gives the shapes (default: tiny)")
    p.add_argument("--device", default="auto", choices=REQUESTS,
                   help="where to time (default auto: CUDA, then an NPU, then the CPU)")
    p.add_argument("--tokens-max", type=int, default=4096, metavar="N",
                   help="the largest tokens of the grid, which runs 1, 2, 4, ... up to it "
                        "(default 4096; decode sequences stop at 256)")
    p.add_argument("--contexts", default=DEFAULT_CONTEXTS, metavar="LIST",
                   help="MLA's KV lengths: decode's, and prefill's after 0 (default "
                        f"{DEFAULT_CONTEXTS})")
    p.add_argument("--repeats", type=int, default=20, metavar="N",
                   help="timed calls per shape, after 3 warm-up calls; the median is kept "
                        "(default 20)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    began = time.perf_counter()
    out = _checked_out(args.out)
    model = _model(args.model)
    contexts = _contexts(args.contexts)
    for name, value, high in (("--tokens-max", args.tokens_max, TOKENS_MAX),
                              ("--repeats", args.repeats, REPEATS_MAX)):
        if not 1 <= value <= high:
            raise BadInput(f"{name} must be an integer in 1..{high}, got {value}")
    from ..run import kernel_calibration as kc  # torch: only once the input is good

    device, ours = _device(args.device)
    try:
        grid = kc.make_grid(args.tokens_max, contexts)
        say = lambda line: print(f"steptrace: calibrate: {line}", file=sys.stderr, flush=True)
        rows = kc.calibrate(model, device, grid, args.repeats, say)
        world = kc.distributed_world()
        if world is not None and world[0] != 0:
            return 0
        table = kc.kernel_table(rows, device)
        _write(table, out)
    except kc.CalibrationError as e:
        raise RunFailed(str(e)) from None
    finally:
        if ours:
            import torch.distributed as dist
            dist.destroy_process_group()
    families = {f: n for f in kc.FAMILY_ORDER if (n := sum(r.family == f for r in rows))}
    result = dict(table=str(out), rows=len(rows), families=families,
                  seconds=round(time.perf_counter() - began, 3), model=model.name,
                  device=device.backend, profile=table.profile, stack=table.stack)
    if args.json:
        print_json(result)
    else:
        counts = ", ".join(f"{f} {n}" for f, n in families.items())
        print(f"{out}: {len(rows)} rows ({counts}) measured on {table.profile} in "
              f"{result['seconds']:.1f} s")
    return 0


def _checked_out(out: Path) -> Path:
    if out.suffix != ".csv":
        raise BadInput(f"--out {out}: expected a FILE.csv path (a kernel table is CSV)")
    if not out.parent.is_dir():
        raise BadInput(f"--out {out}: no folder {out.parent} to write it in")
    try:
        check_output(out)
    except NotAnOutputFile as e:
        raise BadInput(f"--out {e}") from None
    return out


def _model(name: str):
    from engine.model_config import load_model_config

    try:
        model = load_model_config(name)
    except (ValueError, OSError) as e:
        raise BadInput(f"--model {name}: {e}") from None
    if model.architecture != "deepseek_v3":
        raise BadInput(f"--model {name}: calibrate times the torch forward, which implements "
                       f"deepseek_v3 blocks, not {model.architecture}")
    return model


def _contexts(text: str):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(1 <= v <= CONTEXT_MAX for v in values):
        raise BadInput(f"--contexts {text!r}: expected KV lengths in 1..{CONTEXT_MAX}, comma "
                       f"separated, e.g. {DEFAULT_CONTEXTS}")
    return values


def _device(requested: str):
    """The device (BadInput where it is absent) and whether this command set up
    torch.distributed: under torchrun, over every rank, each on its LOCAL_RANK's device."""
    from engine.devices import detect_device

    try:
        device = detect_device(requested)
    except (RuntimeError, ValueError) as e:
        raise BadInput(f"--device {requested}: {e}") from None
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device, False
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return device, False
    if device.backend != "cpu":
        getattr(torch, device.backend).set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = detect_device(device.backend)  # this rank's device's name
    dist.init_process_group(BACKENDS[device.backend])
    return device, True


def _write(table, out: Path) -> None:
    """The table under `out` whole, or nothing: written beside it, then renamed over it."""
    from engine.kernels.table import write

    final = Path(os.path.realpath(out))
    tmp = final.parent / f".{final.name}.{secrets.token_hex(4)}.tmp"
    try:
        write(table, tmp)
        os.replace(tmp, final)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise RunFailed(f"cannot write {out}: {e.strerror or e}") from None
        raise
