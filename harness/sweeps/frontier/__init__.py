"""`search: {method: frontier}`: each device's deployments generated (space.py), estimated
and pruned (estimate.py, deployments.py), each kept one's ladder of concurrencies run
(ladder.py), and the fronts read at equal interactivity (answer.py, summary.py;
docs/frontier.md)."""
