"""Which summary rows each view shows (docs/metrics.md defines every row): `show` and a
run's headline in a report print HEADLINE in this order, `compare` prints the TEXT_STATS of
every metric; `--json`, `--csv` and the tables carry every row."""

HEADLINE = [("steps", "recorded"), ("requests", "finished"), ("requests", "rejected"),
            ("throughput", "requests"), ("throughput", "output_tokens"), ("goodput", "requests"),
            ("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"),
            ("e2e", "p50"),
            ("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
            ("step", "p50"), ("harness", "per_step"), ("achieved", "tflops_per_device"),
            ("mfu", "model")]
TEXT_STATS = frozenset({"p50", "p99", "mean", "value", "total", "peak", "requests",
                        "output_tokens", "total_tokens", "tflops_per_device", "model",
                        "per_step", "per_s", "cpu_share"})
COUNT_UNITS = ("requests", "steps", "samples", "tokens", "blocks")  # shown as whole numbers
