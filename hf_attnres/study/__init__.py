"""The reproduction study: a grid of training runs (`attnres study`, scripts/study.py), their statistics and
scaling fit.

- `grid`: the grid file (JSON): shared model / training settings and the groups of runs to expand.
- `runner`: runs the grid's runs with `attnres train` (a subprocess each), one record per finished run, so a rerun
  skips them; `run_study` is the whole command (train what is missing, then report).
- `analysis`: mean +- std over seeds, paired deltas, the power-law fit L = a * C^b and the compute multiplier.
- `report`: RESULTS.md and the PNG plots from the records.
"""
