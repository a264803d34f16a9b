"""The lowest tool layer, shared by the commands: which extra brings a dependency, which output a command may replace,
trust of a folder's code, finite-weight checks, flag reading, tiny configs for tests and demos. Never imported by the
model core."""
