"""Continued training of a real pretrained checkpoint: the original model with its standard residual, and
the same model upcycled to Block or Full AttnRes (or with only the new depth mixing trained), each at its own best
learning rate, paired per seed. `attnres continued-study`; grids: configs/study/continued-*.json."""
