"""transformers' own AttnRes models on this package's kernels: one module per model type, each swapping the forward of
that model's depth-mix modules (no change to its weights, its config or transformers' code)."""
