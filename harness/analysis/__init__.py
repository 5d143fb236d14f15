"""Turning result folders into answers: runs read back (runs.py), arms compared with
bootstrap intervals over runs (compare.py), the regression gate (gate.py) and the report
(report/). Reads result folders only; never imports the engine."""
