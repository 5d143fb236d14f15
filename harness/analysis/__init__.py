"""Turning result folders into answers: runs read back (runs.py), arms compared with
bootstrap intervals over runs (compare.py) and the regression gate (gate.py). Reads
result folders only; never imports the engine."""
