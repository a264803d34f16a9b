"""The tools' model folders (`hf_attnres.save` / `hf_attnres.load`): a damaged folder refused naming the damage, a
config.json
edited after saving refused against the weights record, and a save that dies leaving the previous model intact. A
plain `save_pretrained` / `from_pretrained` is transformers' own (plus the generated code files on save)."""
from __future__ import annotations

import json

import pytest

import hf_attnres
from hf_attnres import KimiLinearAttnResConfig, KimiLinearAttnResForCausalLM
from hf_attnres.folders.saved_model import RECORD_FILE
from tests.helpers.bad_input_fixtures import INDEX_DAMAGE, MODEL_FOLDER_DAMAGE, damaged_copy, expect_refused, snapshot
from tests.helpers.model_factory import tiny_model


def load(folder, **kwargs):
    return hf_attnres.load(folder, model_class=KimiLinearAttnResForCausalLM, **kwargs)


# --- saved folders: hf_attnres.load ----------------------------------------------------------------------------------
FOLDER_CASES = {**MODEL_FOLDER_DAMAGE}
INDEX_CASES = {**INDEX_DAMAGE}


@pytest.mark.parametrize("damage, named", FOLDER_CASES.values(), ids=FOLDER_CASES.keys())
def test_load_damaged_folder(saved_model, tmp_path, damage, named):
    folder = damaged_copy(saved_model, tmp_path, damage)
    expect_refused(lambda: load(folder), [str(folder), *named],
                   untouched=[folder])


@pytest.mark.parametrize("damage, named", INDEX_CASES.values(), ids=INDEX_CASES.keys())
def test_load_damaged_index(sharded_model, tmp_path, damage, named):
    folder = damaged_copy(sharded_model, tmp_path, damage)
    expect_refused(lambda: load(folder), named, untouched=[folder])


def test_config_from_folder_without_config_json(saved_model, tmp_path):
    folder = damaged_copy(saved_model, tmp_path, lambda f: (f / "config.json").unlink())
    expect_refused(lambda: KimiLinearAttnResConfig.from_pretrained(folder), [str(folder), "config.json"])


# --- the weights record: config.json edited after saving -----------------------------------------------------------
RECORD_CASES = {
    "block_size_2_to_3": (dict(attn_res_block_size=3), ["attn_res_block_size", "2", "3"]),
    "block_to_full": (dict(attn_res_mode="full", attn_res_block_size=0), ["attn_res_mode", "'block'", "'full'"]),
}


@pytest.mark.parametrize("changes, named", RECORD_CASES.values(), ids=RECORD_CASES.keys())
def test_config_disagreeing_with_weights_refused(saved_model, tmp_path, changes, named):
    folder = damaged_copy(saved_model, tmp_path, lambda f: None)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    expect_refused(lambda: load(folder), [RECORD_FILE, *named],
                   untouched=[folder])
    if "attn_res_mode" not in changes:  # asked for explicitly: loads (with a warning naming the field)
        assert load(folder, **changes).config.attn_res_block_size == 3


def test_record_written_and_matching_folder_loads(saved_model):
    record = json.loads((saved_model / RECORD_FILE).read_text())
    assert (record["attn_res_mode"], record["attn_res_block_size"], record["num_hidden_layers"]) == ("block", 2, 4)
    load(saved_model)


class _Boom(RuntimeError):
    pass


def test_failed_save_over_a_model_keeps_the_old_one(saved_model, tmp_path, monkeypatch):
    """The save dies after writing the new config (the issue's 'new config + old weights' case): nothing changes."""
    folder = damaged_copy(saved_model, tmp_path, lambda f: None)
    (folder / "tokenizer.json").write_text("{}")
    before = snapshot(folder)
    other = tiny_model("block", 3, num_layers=4, seed=5)
    # transformers' save, under the tools' atomic one (the first class after the AttnRes classes in the model's MRO)
    base = next(c for c in type(other).__mro__ if c.__module__.startswith("transformers."))
    real_save = base.save_pretrained

    def dying_save(self, directory, *args, **kwargs):
        self.config.save_pretrained(directory)
        raise _Boom("disk full")

    monkeypatch.setattr(base, "save_pretrained", dying_save)
    with pytest.raises(_Boom):
        hf_attnres.save(other, folder)
    monkeypatch.setattr(base, "save_pretrained", real_save)
    assert snapshot(folder) == before
    assert not list(tmp_path.glob(".*partial*"))
    # a completed save replaces the model but keeps the unrelated file
    hf_attnres.save(other, folder)
    assert (folder / "tokenizer.json").read_text() == "{}"
    assert load(folder).config.attn_res_block_size == 3


def test_save_onto_a_file_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    expect_refused(lambda: hf_attnres.save(tiny_model("block", 2, num_layers=2), tmp_path / "file"), ["file"],
                   untouched=[tmp_path / "file"])


def test_a_plain_save_writes_no_record_and_loads_as_transformers_does(tmp_path):
    model = tiny_model("block", 2, num_layers=2)
    model.save_pretrained(tmp_path / "plain")
    assert not (tmp_path / "plain" / RECORD_FILE).exists()
    assert (tmp_path / "plain" / "modeling_kimi_linear_attnres.py").is_file()  # the code still travels
    assert load(tmp_path / "plain").config.attn_res_block_size == 2  # no record: nothing to compare against
