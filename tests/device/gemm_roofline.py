"""Measured against modeled: each GEMM row of a measured kernel table beside the roofline a
device profile gives the same shape (bf16 weights and activations, the profile's
compute_efficiency and memory_efficiency), and their ratio (measured / roofline: above 1,
the device is slower than the profile models it).

    python tests/device/gemm_roofline.py TABLE.csv [--profile h100]

Without --profile, the bundled profile whose name the table's `profile` (the device's
name) contains, the longest such name (GB200 over B200).
"""

import argparse
import statistics
import sys
from typing import Dict, List

from engine.devices import DeviceProfile, known_profiles, load_device_profile
from engine.kernels.table import read

BF16_BYTES = 2


def profile_of(device_name: str) -> DeviceProfile:
    squeeze = lambda s: s.lower().replace(" ", "").replace("-", "")
    matches = [p for p in map(load_device_profile, known_profiles())
               if squeeze(p.name) in squeeze(device_name)]
    if not matches:
        raise SystemExit(f"no bundled profile named in {device_name!r}: pass --profile")
    return max(matches, key=lambda p: len(p.name))


def roofline_us(profile: DeviceProfile, m: int, n: int, k: int):
    """(microseconds, the bound: compute or memory) of an (m x k) @ (k x n) GEMM."""
    compute = 2 * m * n * k / (profile.peak("bf16") * 1e12 * profile.compute_efficiency.value)
    memory = BF16_BYTES * (m * k + k * n + m * n) / (
        profile.figure("hbm_tb_s") * 1e12 * profile.memory_efficiency.value)
    return max(compute, memory) * 1e6, "compute" if compute >= memory else "memory"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", help="a kernel table `steptrace calibrate` wrote")
    p.add_argument("--profile", help="a bundled device profile (default: the table's device)")
    args = p.parse_args(argv)
    table = read(args.table)
    profile = load_device_profile(args.profile) if args.profile else profile_of(table.profile)
    gemms = sorted((r for r in table.rows if r.family == "gemm"),
                   key=lambda r: (r.n, r.k, r.tokens))
    if not gemms:
        print(f"{args.table}: no gemm rows", file=sys.stderr)
        return 1
    print(f"{args.table} ({table.profile}; {table.stack}) against profile {profile.name}: "
          f"bf16 {profile.peak('bf16'):g} TFLOP/s x {profile.compute_efficiency.value:g}, "
          f"HBM {profile.figure('hbm_tb_s'):g} TB/s x {profile.memory_efficiency.value:g}")
    print(f"{'n':>7} {'k':>7} {'tokens':>7} {'measured_us':>12} {'roofline_us':>12} "
          f"{'ratio':>7}  bound")
    ratios: Dict[str, List[float]] = {}
    for r in gemms:
        model_us, bound = roofline_us(profile, r.tokens, r.n, r.k)
        ratio = r.time_us / model_us
        ratios.setdefault(bound, []).append(ratio)
        print(f"{r.n:>7} {r.k:>7} {r.tokens:>7} {r.time_us:>12.4g} {model_us:>12.4g} "
              f"{ratio:>7.3g}  {bound}")
    for bound, values in sorted(ratios.items()):
        print(f"{bound}-bound shapes: {len(values)}, measured / roofline median "
              f"{statistics.median(values):.3g} (min {min(values):.3g}, max {max(values):.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
