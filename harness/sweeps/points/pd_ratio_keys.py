"""`search: {method: pd_ratio}`: the keys the search sets and the bound on its `near`, read
with the sweep file (docs/sweeps.md, "The P/D ratio search")."""

PREFILL, DECODE = "deployment.prefill.instances", "deployment.decode.instances"
INSTANCES = (PREFILL, DECODE)  # set by the search: not axes
# `near`, at most: 33 deployments searched a point; wider is a grid of instance counts (the
# sweep's axes), and a million planned two million capacity searches
MAX_NEAR = 16
