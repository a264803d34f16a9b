"""Record the fixtures of tests/families/test_unchanged_behaviour.py with the code checked out now (not run by tests).

For every supported family, a tiny model (a few KB) in block and in full mode with random pseudo-queries
(`attn_res_query_init_std`), built from a seed: its config (`configs.json`), its logits on fixed ids
(`logits.safetensors`), and the block model's folder written by that code's `save_pretrained`, stored as one archive
(`folders/<family>.tar.gz`: the folder's files at its root, made reproducibly by `pack`, read back by `unpack`): the
saved code is that commit's, kept whole and out of the way of the tools that read the project's own code. The tests
rebuild each model from its config and seed and require the same logits bit for bit, and require every folder to load,
with and without attnres importable.

    PYTHONPATH=$PWD python3 tests/data/unchanged/record.py            # every family, anew
    PYTHONPATH=$PWD python3 tests/data/unchanged/record.py phi3       # a family added later, beside the others

A family added after the others is recorded alone (the others keep the behaviour they were recorded with).
"""
import gzip
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

SEED = 0
VOCAB = 32
SHAPE = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
             num_key_value_heads=1, head_dim=8, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
             eos_token_id=2, attn_res_query_init_std=0.5)
# what distinguishes each family switched on (sliding windows shorter than the ids, Gemma's soft-capping); Kimi
# Linear with MLA layers only (its KDA layers need CUDA)
FAMILIES = {
    "llama": {},
    "mistral": dict(sliding_window=4),
    "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "qwen3": {},
    "gemma3_text": dict(sliding_window=4, final_logit_softcapping=30.0),
    "phi3": dict(head_dim=None, partial_rotary_factor=0.5),
    "kimi_linear": dict(head_dim=None, num_key_value_heads=2, moe_intermediate_size=8, kv_lora_rank=8,
                        qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, num_local_experts=2,
                        num_experts_per_tok=1, linear_num_heads=2, linear_head_dim=8,
                        layer_types=["full_attention"] * 3),
}
MODES = {"block": 2, "full": 0}


def config_fields(family: str, mode: str) -> dict:
    fields = {key: value for key, value in (SHAPE | FAMILIES[family]).items() if value is not None}
    return fields | dict(attn_res_mode=mode, attn_res_block_size=MODES[mode])


def ids() -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))


def archive(family: str) -> Path:
    return HERE / "folders" / f"{family}.tar.gz"


def pack(folder: Path, target: Path) -> None:
    """`folder`'s files as a gzipped tar at `target`, the same bytes for the same files: members sorted by name, mode
    0644, no owner, time 0 (in the tar and in the gzip header); written beside `target`, then renamed over it."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(folder.iterdir()):
                if not path.is_file() or path.is_symlink():
                    raise ValueError(f"{path}: a recorded folder holds plain files only")
                info = tarfile.TarInfo(path.name)
                info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
                with open(path, "rb") as file:
                    tar.addfile(info, file)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as tmp:
        try:
            tmp.write(raw.getvalue())
            tmp.close()
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, target)
        finally:
            if os.path.lexists(tmp.name):
                os.unlink(tmp.name)


def unpack(family: str, destination: Path) -> Path:
    """The recorded folder of `family`, extracted into `destination` (created; tarfile's "data" filter: plain files
    inside it only). Returns `destination`."""
    destination.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive(family), mode="r:gz") as tar:
        tar.extractall(destination, filter="data")
    return destination


def build(family: str, fields: dict):
    from hf_attnres.families.registry import family_classes

    config_class, model_class = family_classes(family)
    torch.manual_seed(SEED)
    return model_class(config_class(**fields)).eval()


def main(only: list[str]) -> None:
    import hf_attnres  # noqa: F401  (registers the Auto classes, as a user's script does)
    from hf_attnres.families.registry import SUPPORTED

    configs, logits = {}, {"ids": ids()}
    if only:  # beside the recorded families, which keep their fixtures
        configs = json.loads((HERE / "configs.json").read_text())
        logits = load_file(HERE / "logits.safetensors")
        assert torch.equal(logits["ids"], ids())
    for family in only or SUPPORTED:
        for mode in MODES:
            fields = config_fields(family, mode)
            model = build(family, fields)
            configs[f"{family}.{mode}"] = fields
            with torch.no_grad():
                logits[f"{family}.{mode}"] = model(logits["ids"]).logits.contiguous()
            if mode == "block":
                with tempfile.TemporaryDirectory() as tmp:
                    model.save_pretrained(Path(tmp) / family)
                    pack(Path(tmp) / family, archive(family))
    save_file(logits, HERE / "logits.safetensors")
    (HERE / "configs.json").write_text(json.dumps(configs, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
