"""The frontier search's tables (docs/frontier.md), written in the sweep's folder beside its
`sweep` table: every rung as a front point or left off, every deployment considered, and
each device's fronts read at the levels."""

from __future__ import annotations

from .column import BOOL, F64, I64, TEXT, Table, col as _col

# Each front's measure: its readings' `metric` -> the frontier_points column it reads; the
# first two each rung says it is on (`front_<metric>`), the others read where some point
# has the figure (power, prices)
MEASURES = {"output": "output_tokens_per_s_per_device",
            "total": "total_tokens_per_s_per_device",
            "per_kw": "output_tokens_per_kw", "per_dollar_hour": "output_tokens_per_dollar_hour"}
FLAGGED = ("output", "total")
STATES = ("kept", "pruned", "refused", "failed")  # frontier_deployments' `state`
STEADY = "frontier.md#the-steady-state-window"
FRONT = "frontier.md#the-front-and-its-readings"
SPACE = "frontier.md#the-deployments"


_DEPLOYMENT = (
    _col("device", TEXT, "", "the grid point's `device`"),
    _col("deployment", TEXT, "", "the deployment's name: its instances' shapes (DEP8: DP "
         "attention and EP over 8 devices; TEP8: attention TP and EP over 8; xP ... + yD ...: "
         "x prefill and y decode instances), `vote` or `mixed` batches, its MTP", SPACE),
    _col("kind", TEXT, "", "`co-located` or `P/D`"),
    _col("devices", I64, "devices", "the deployment's devices, every instance of both pools"),
    _col("mtp", I64, "tokens", "MTP draft tokens a step"),
)
FRONTIER_POINTS = Table("frontier_points", "rung of a frontier search's ladder: one run of "
                        "one deployment at one concurrency",
                        "by device, then deployment, then concurrency", (
    *_DEPLOYMENT,
    _col("batch", I64, "sequences", "sequences a decode DP rank at this rung"),
    _col("concurrency", I64, "requests", "requests in flight (load.mode concurrency): "
         "`batch` on every decode rank"),
    _col("requests", I64, "requests", "the rung's trace: `rounds` x its concurrency, within "
         "64 and the search's `requests`"),
    _col("point", TEXT, "", "the rung's point key (its folder under points/)"),
    _col("status", TEXT, "", "`done`, `failed` or `refused`, as the sweep table says"),
    _col("reason", TEXT, "", "why it failed or was refused"),
    _col("stop", TEXT, "", "why the ladder stopped at this rung (the SLO missed, the batch "
         "cap, a failure); empty while it climbed on"),
    _col("steady", BOOL, "", "the run had a steady window", STEADY),
    _col("steady_reason", TEXT, "", "why it had none; empty when it had", STEADY),
    _col("window_start_s", F64, "s", "the steady window's start: the running sequences' "
         "plateau", STEADY),
    _col("window_end_s", F64, "s", "its end: the last step ending by the last arrival", STEADY),
    _col("window_s", F64, "s", "its length", STEADY),
    _col("window_steps", I64, "steps", "steps of the deciding pool in it", STEADY),
    _col("output_tokens_per_s_per_device", F64, "tok/s", "output tokens over the window, per "
         "second and device", STEADY),
    _col("total_tokens_per_s_per_device", F64, "tok/s", "prompt and output tokens over the "
         "window, per second and device", STEADY),
    _col("tokens_per_s_per_user", F64, "tok/s", "the median 1 / TPOT of the requests "
         "decoding in the window (MTP's accepted drafts included)", STEADY),
    _col("tpot_p50_s", F64, "s", "TPOT p50 of the requests arriving in the window", STEADY),
    _col("tpot_p90_s", F64, "s", "TPOT p90 of those requests", STEADY),
    _col("ttft_p50_s", F64, "s", "TTFT p50 of those requests", STEADY),
    _col("ttft_p90_s", F64, "s", "TTFT p90 of those requests", STEADY),
    _col("whole_run_output_tokens_per_device", F64, "tok/s", "the sweep table's "
         "`output_tokens_per_device`: over the whole run, fill and drain included"),
    _col("whole_run_tokens_per_s_per_user", F64, "tok/s", "the sweep table's "
         "`tokens_per_s_per_user`: 1 / the whole run's TPOT p50"),
    _col("attainment", F64, "fraction", "the run's SLO attainment (NaN without an SLO)",
         "metrics.md#run-level"),
    _col("power_w", F64, "W", "the sweep table's `power_w`: power per device over the run",
         "metrics.md#power-and-cost"),
    _col("output_tokens_per_kw", F64, "tok/s per kW", "`output_tokens_per_s_per_device` over "
         "`power_w` in kW", "metrics.md#power-and-cost"),
    _col("output_tokens_per_dollar_hour", F64, "tok/s per $/h",
         "`output_tokens_per_s_per_device` over the sweep file's `prices` for the device; "
         "NaN without one", "sweeps.md#cost-and-energy"),
    _col("eligible", BOOL, "", "a front point: done, a steady window, its TTFT p90 within "
         "the SLO's TTFT limit", FRONT),
    _col("left_off", TEXT, "", "why it is no front point; empty when it is one", FRONT),
    _col("front_output", BOOL, "", "on its device's front of output tok/s per device", FRONT),
    _col("front_total", BOOL, "", "on its device's front of total tok/s per device", FRONT),
))
FRONTIER_DEPLOYMENTS = Table("frontier_deployments", "deployment a frontier search "
                             "considered for a device", "by device, in the space's order", (
    *_DEPLOYMENT,
    _col("state", TEXT, "", "`kept` (its ladder ran), `pruned` (its estimate fell short), "
         "`refused` (not a valid workload: the memory check) or `failed` (its estimate "
         "could not be stepped)", SPACE),
    _col("reason", TEXT, "", "why it was pruned, refused or failed"),
    _col("score", F64, "ratio", "its estimate's best output tok/s per device over the "
         "device's estimated front at the same tok/s per user", "frontier.md#pruning"),
    _col("estimated_best", F64, "tok/s", "its estimate's highest output tok/s per device",
         "frontier.md#pruning"),
))
FRONTIER_READINGS = Table("frontier_readings", "a device's front read at one level of tok/s "
                          "per user", "by metric, then level, then device", (
    _col("metric", TEXT, "", "the front's measure: `output` or `total` tok/s per device, "
         "`per_kw` (output tok/s per kW) or `per_dollar_hour` (per $/h)"),
    _col("device", TEXT, "", "the device"),
    _col("level", F64, "tok/s", "tok/s per user read at"),
    _col("value", F64, "", "the measure there (tok/s per device, per kW or per $/h), between "
         "the two front points around the level; NaN beyond the front's points (`reason`)",
         FRONT),
    _col("low", F64, "", "the interval's low end: the right neighbour's value", FRONT),
    _col("high", F64, "", "its high end: the left neighbour's value", FRONT),
    _col("left", TEXT, "", "the front point below the level: deployment @ concurrency"),
    _col("left_x", F64, "tok/s", "its tok/s per user"),
    _col("left_y", F64, "", "its measure"),
    _col("right", TEXT, "", "the front point above the level"),
    _col("right_x", F64, "tok/s", "its tok/s per user"),
    _col("right_y", F64, "", "its measure"),
    _col("reason", TEXT, "", "why there is no value; empty when there is"),
    _col("reference", TEXT, "", "the device the ratio is to"),
    _col("ratio", F64, "ratio", "`value` over the reference's at the level", FRONT),
    _col("ratio_low", F64, "ratio", "the ratio's interval: low over the reference's high",
         FRONT),
    _col("ratio_high", F64, "ratio", "high over the reference's low", FRONT),
    _col("ratio_reason", TEXT, "", "why there is no ratio; empty when there is"),
))
FRONTIER_TABLES = (FRONTIER_POINTS, FRONTIER_DEPLOYMENTS, FRONTIER_READINGS)
TABLE_NAMES = tuple(t.name for t in FRONTIER_TABLES)  # the files a search writes together
