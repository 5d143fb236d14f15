"""A device profile whose step is timed from a measured kernel table: a bundled profile's
figures (memory, links, peaks), its `kernels:` replaced by the one table `steptrace
calibrate` wrote (docs/calibrate.md, "How a profile uses it").

    python -m tests.device.measured_profile TABLE.csv OUT.yaml [--profile h100]

Without --profile, the bundled profile the table's device names (gemm_roofline.py's rule).
"""

import argparse
import sys
from pathlib import Path

import yaml

from engine.devices.profile import DEVICES_DIR
from engine.kernels.table import read
from tests.device.gemm_roofline import profile_of


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", type=Path, help="a kernel table `steptrace calibrate` wrote")
    p.add_argument("out", type=Path, help="the profile file to write (.yaml)")
    p.add_argument("--profile", help="a bundled device profile (default: the table's device)")
    args = p.parse_args(argv)
    table = read(args.table)
    name = args.profile or profile_of(table.profile).name
    stem = name.strip().lower().replace(" ", "-")
    data = yaml.safe_load((DEVICES_DIR / f"{stem}.yaml").read_text())
    data.pop("family_efficiency", None)
    data["name"] = f"{data['name']} (measured)"
    data["kernels"] = {"measured": {"table": str(args.table.resolve()), "families": [],
                                    "source": table.source}}
    args.out.write_text(yaml.safe_dump(data, sort_keys=False))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
