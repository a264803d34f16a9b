"""Tools that run the model to show or measure it: the first-run demo (`demo`), whole-model benchmarks (`model`) and
the depth-mix kernel benchmarks (`kernels`). Import the modules themselves; this package imports nothing."""
