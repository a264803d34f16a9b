"""Tools shared by the commands: which extra brings a dependency, which output a command may replace, trust of a
folder's code, finite-weight checks, flag reading, one-line refusals, tokenizer files, tiny configs for tests and demos.

A tool layer above `hf_attnres.folders` (whose atomic writes and checkpoint listing it uses) and below every command
layer; it may import the model side (a family's registry and configuration), and the model side never imports it.
tests/test_layout.py holds the order."""
