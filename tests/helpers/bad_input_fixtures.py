"""Shared pieces of the bad-input suite (tests/test_bad_inputs_*.py): the outcome classes every case asserts, file
damage helpers, and session-wide tiny artefacts (a saved model, a Moonshot checkpoint, a dataset, a train checkpoint).

Adding a case: append a row to the table of its area (each test file has one `*_CASES` list per entry point); a row
names what it breaks and the words the error must contain. A new entry point gets its own table and one test
function that runs it and calls `expect_refused` (or `expect_clear_error`)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers.safetensors_damage import HEADER_DAMAGE

SENTINEL = "do not delete me\n"


def snapshot(*paths) -> dict:
    """Every file under `paths` (name -> sha256), to prove a refused run left its inputs untouched."""
    found = {}
    for root in map(Path, paths):
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        for path in files:
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def expect_clear_error(error: BaseException, *named: str) -> str:
    """The outcome class 'clear error': one short message (no traceback text) containing every `named` string."""
    message = str(error.code if isinstance(error, SystemExit) else error)
    assert "Traceback" not in message and len(message) < 2000, message
    for name in named:
        assert name.lower() in message.lower(), f"{name!r} not in {message!r}"
    return message


def expect_refused(run, named, untouched=(), absent=(), errors=(ValueError, OSError, SystemExit)):
    """Run `run()`; it must raise one of `errors` naming every string in `named`, leave the files under `untouched`
    bit for bit as they were, and create none of `absent`."""
    before = snapshot(*untouched)
    with pytest.raises(errors) as info:
        run()
    message = expect_clear_error(info.value, *named)
    assert snapshot(*untouched) == before, f"inputs changed by a refused run: {message}"
    for path in absent:
        assert not Path(path).exists(), f"{path} was written by a refused run"
    return message


def expect_script_refused(main, capsys, argv, named, untouched=(), absent=()) -> str:
    """The outcome class for a script's main(argv) that returns an exit code: 1, one 'error:' message on stderr (no
    traceback) naming every string in `named`, `untouched` bit for bit as before, nothing of `absent` written."""
    before = snapshot(*untouched)
    assert main([*map(str, argv)]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err, err
    for name in named:
        assert str(name) in err, f"{name!r} not in {err!r}"
    assert snapshot(*untouched) == before, f"inputs changed by a refused run: {err}"
    for path in absent:
        assert not Path(path).exists(), f"{path} was written by a refused run"
    return err


def truncate(path: Path, keep: float = 0.5) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * keep)])


def overwrite_json(path: Path, **changes) -> None:
    data = json.loads(Path(path).read_text())
    data.update(changes)
    Path(path).write_text(json.dumps(data))


def copy_tree(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# -- damage applied to a model folder (config.json + safetensors [+ index]) ------------------------------------------
def first_shard(folder: Path) -> Path:
    return sorted(Path(folder).glob("*.safetensors"))[0]


MODEL_FOLDER_DAMAGE = {
    # name: (damage(folder), words the error must contain)
    "no_config": (lambda f: (f / "config.json").unlink(), ["config.json"]),
    "config_invalid_json": (lambda f: (f / "config.json").write_text("{not json"), ["config.json", "JSON"]),
    "config_not_utf8": (lambda f: (f / "config.json").write_bytes(b"\xff\xfe{}"), ["config.json", "UTF-8"]),
    "config_is_a_list": (lambda f: (f / "config.json").write_text("[1, 2]"), ["config.json", "object"]),
    "truncated_weights": (lambda f: truncate(first_shard(f)), [".safetensors", "truncated"]),
    "weights_not_safetensors": (lambda f: first_shard(f).write_bytes(b"PK\x03\x04 zip, not safetensors" * 4),
                                [".safetensors"]),
    "weights_header_garbage": (lambda f: first_shard(f).write_bytes((40).to_bytes(8, "little") + b"\xff" * 60),
                               [".safetensors", "header"]),
    "weights_are_a_fifo": (lambda f: replace_with_fifo(first_shard(f)), [".safetensors", "not a regular file"]),
    "config_nested_100000_deep": (lambda f: (f / "config.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000),
                                  ["config.json", "nested too deeply"]),
    **HEADER_DAMAGE,  # headers that lie (offsets, names, dtypes, shapes, nesting) and an int32 lm_head
}

INDEX_DAMAGE = {
    "index_invalid_json": (lambda f: (f / "model.safetensors.index.json").write_text("{"), ["index.json", "JSON"]),
    "index_without_weight_map": (lambda f: (f / "model.safetensors.index.json").write_text('{"metadata": {}}'),
                                 ["index.json", "weight_map"]),
    "index_lists_missing_shard": (lambda f: overwrite_json(f / "model.safetensors.index.json",
                                                          weight_map={"model.norm.weight": "gone.safetensors"}),
                                  ["gone.safetensors"]),
    "index_names_parent_folder": (lambda f: overwrite_json(f / "model.safetensors.index.json",
                                                          weight_map={"model.norm.weight": "../x.safetensors"}),
                                  ["../x.safetensors", "not files inside"]),
    "index_names_absolute_path": (lambda f: overwrite_json(f / "model.safetensors.index.json",
                                                          weight_map={"model.norm.weight": "/etc/passwd"}),
                                  ["/etc/passwd", "not files inside"]),
}


# dtype names a model folder's config may carry that this model cannot compute in (float8 is a storage format), or
# that are not dtypes at all ("os.system": transformers would look it up on torch); the error names the field
CONFIG_DTYPE_DAMAGE = {
    "config_dtype_float8": (lambda f: overwrite_json(f / "config.json", dtype="float8_e4m3fn"),
                            ["dtype", "float8_e4m3fn", "bfloat16"]),
    "config_torch_dtype_float8": (lambda f: overwrite_json(f / "config.json", torch_dtype="float8_e4m3fn"),
                                  ["torch_dtype", "float8_e4m3fn", "bfloat16"]),
    "config_torch_dtype_os_system": (lambda f: overwrite_json(f / "config.json", torch_dtype="os.system"),
                                     ["torch_dtype", "os.system", "bfloat16"]),
}


def replace_with_fifo(path: Path) -> None:
    """A named pipe where a weight file was: opening it for reading would block forever."""
    path.unlink()
    os.mkfifo(path)


def damaged_copy(source: Path, tmp_path: Path, damage) -> Path:
    folder = copy_tree(source, tmp_path / "damaged")
    damage(folder)
    return folder


def words(pattern: str) -> str:
    return re.escape(pattern)


@pytest.fixture(scope="session")
def saved_model(tmp_path_factory):
    """A tiny block-AttnRes model saved by `hf_attnres.save` (weights record included); do not modify: copy it."""
    import hf_attnres
    from tests.helpers.model_factory import tiny_model

    folder = tmp_path_factory.mktemp("bad_inputs") / "model"
    hf_attnres.save(tiny_model("block", 2, num_layers=4), folder)
    return folder


@pytest.fixture(scope="session")
def sharded_model(tmp_path_factory):
    """The same kind of model in several shards with an index."""
    import hf_attnres
    from tests.helpers.model_factory import tiny_model

    folder = tmp_path_factory.mktemp("bad_inputs") / "sharded"
    hf_attnres.save(tiny_model("block", 2, num_layers=4), folder, max_shard_size="50KB")
    assert (folder / "model.safetensors.index.json").is_file()
    return folder


@pytest.fixture(scope="session")
def moonshot_checkpoint(tmp_path_factory):
    from hf_attnres.conversion.kimi_linear.fixtures import random_model, write_moonshot_checkpoint
    from hf_attnres.utils.tiny import tiny_config

    folder = tmp_path_factory.mktemp("bad_inputs") / "kimi"
    write_moonshot_checkpoint(folder, random_model(tiny_config("standard", num_layers=3,
        family="kimi_linear")), max_shard_size="60KB")
    (folder / "notes.txt").write_text(SENTINEL)
    return folder


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory):
    from tests.helpers.train_fixtures import prepare_tiny_dataset

    return prepare_tiny_dataset(tmp_path_factory.mktemp("bad_inputs_data"))


def in_tmp_cwd(monkeypatch, tmp_path) -> None:
    """Scripts with default output paths run inside the test's folder."""
    monkeypatch.chdir(tmp_path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


# -- non-finite weights (the tools' numeric guard, hf_attnres/utils/finite_weights.py) ---------------------------
def nan_weight(path: Path, value: float = float("nan")) -> str:
    """Set one value of the first floating tensor of a safetensors file (or a folder's first shard) to `value`
    (NaN by default); returns the tensor's name, which the error must give."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = first_shard(path) if Path(path).is_dir() else Path(path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    name = sorted(n for n, t in tensors.items() if t.is_floating_point())[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = value
    save_file(tensors, str(path), metadata=metadata)
    return name


NONFINITE_DAMAGE = {
    "weight_nan": (lambda f: nan_weight(f), [".safetensors", "non-finite", "1 NaN"]),
    "weight_inf": (lambda f: nan_weight(f, float("inf")), [".safetensors", "non-finite", "1 inf"]),
}
