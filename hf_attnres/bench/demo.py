"""The first run of attnres, `attnres demo` (scripts/demo.py): a tiny AttnRes model of any family (`--family`, Llama
by default) fit briefly to a toy sequence, saved and reloaded, generating, and where each sub-layer looks over depth
(printed, optionally plotted)."""
from __future__ import annotations

import os
import tempfile

import torch
from tqdm import trange

from ..core.depth_layout import MIX_POINTS, OUTPUT_POINT, DepthLayout
from ..families.registry import family_classes
from ..folders.model_folder import load as load_model_folder
from ..folders.model_folder import save as save_model_folder
from ..utils.tiny import tiny_config
from .args import DemoArgs


def toy_batch(vocab: int, batch: int = 4, length: int = 32) -> torch.Tensor:
    """Counting sequences modulo a small period: learnable in a few dozen steps, so the depth weights move."""
    starts = torch.randint(3, vocab - 20, (batch, 1))
    return starts + torch.arange(length) % 16


def fit(model, steps: int) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in (bar := trange(steps, desc="fitting toy sequence", disable=steps == 0)):
        ids = toy_batch(model.config.vocab_size)
        loss = model(ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def mix_point_names(num_layers: int) -> list[str]:
    return [f"layer {i} {part}" for i in range(num_layers) for part in ("attn", "mlp ")] + ["output    "]


def source_names(config) -> list[str]:
    """The sources the output mix reads, which are the most of any mix point (hf_attnres.core.depth_layout)."""
    return DepthLayout.of(config).source_names(config.num_hidden_layers, OUTPUT_POINT)


def point_source_names(config) -> list[list[str]]:
    """The names of the sources of each mix point, in mix_point_names' order: each point's own (an earlier point reads
    fewer completed blocks, and its last source is its block's running partial sum, not a completed block)."""
    layout, layers = DepthLayout.of(config), config.num_hidden_layers
    points = [(i, point) for i in range(layers) for point in MIX_POINTS] + [(layers, OUTPUT_POINT)]
    return [layout.source_names(i, point) for i, point in points]


def print_weights(weights, config) -> None:
    """Mean softmax weight of each mix point over each of its sources (in depth order; the last is the newest)."""
    print("\nDepth attention (mean over tokens), each mix point over its sources in depth order (emb: the embedding, "
          "blkN: a completed block's sum, partial: the current block's running partial sum):")
    for point, names, w in zip(mix_point_names(config.num_hidden_layers), point_source_names(config), weights):
        mean = w.float().mean(dim=(0, 1))
        cells = " ".join(f"{names[j] if j < len(names) else '?'}={v:.2f}" for j, v in enumerate(mean.tolist()))
        print(f"  {point}: {cells}")


def plot_weights(weights, config, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = source_names(config)  # the output mix reads every kind of source: one column each, by name
    width = len(columns)
    grid = torch.full((len(weights), width), float("nan"))
    for row, (names, w) in enumerate(zip(point_source_names(config), weights)):
        for name, value in zip(names, w.float().mean(dim=(0, 1)).tolist()):
            grid[row, columns.index(name)] = value  # a point's partial sum goes in the "partial" column
    fig, ax = plt.subplots(figsize=(3 + 0.5 * width, 1.5 + 0.3 * len(weights)))
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(width), columns, rotation=90)
    ax.set_yticks(range(len(weights)), [name.strip() for name in mix_point_names(config.num_hidden_layers)])
    ax.set_xlabel("source (depth order)")
    ax.set_ylabel("mix point")
    ax.set_title(f"depth weights ({config.attn_res_mode})")
    fig.colorbar(image, ax=ax, label="mean softmax weight")
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)  # never leave a half-written image
    print(f"wrote {path}")


def demo(args: DemoArgs) -> None:
    """Build, fit, save and reload, generate, then print (and with args.plot draw) the depth weights."""
    torch.manual_seed(args.seed)
    config = tiny_config(args.mode, args.block_size, args.layers, family=args.family)
    model_class = family_classes(args.family)[1]
    model = model_class(config)
    print(f"{args.family} {args.mode} AttnRes, {args.layers} layers, {config.attn_res_num_blocks} block(s), "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")
    with torch.no_grad():  # a first forward before the progress bar: a first-time kernel build says so and its
        model(torch.arange(3, 7).unsqueeze(0))  # minutes are not a bar stuck at 0; no RNG drawn
    fit(model, args.steps)

    with tempfile.TemporaryDirectory() as folder:  # the save/load round trip users do with the Hub
        save_model_folder(model, folder)
        model = load_model_folder(folder, model_class=model_class).eval()

    prompt = toy_batch(config.vocab_size, batch=1, length=8)
    generated = model.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False)
    print(f"prompt:    {prompt[0].tolist()}\ngenerated: {generated[0, prompt.shape[1]:].tolist()}")

    with torch.no_grad():
        weights = model(prompt, output_attn_res_weights=True).attn_res_weights
    if weights is None:
        print("\nstandard residuals: there is no depth attention to show (try --mode block).")
        return
    print_weights(weights, config)
    if args.plot:
        plot_weights(weights, config, args.plot)


__all__ = ["demo", "toy_batch"]
