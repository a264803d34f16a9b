"""The model's behaviour against fixtures recorded before the package was reorganised (tests/data/unchanged, written
by its record.py): every family's tiny model in block and full mode with random pseudo-queries gives the recorded
logits, and the folders saved then (stored as one archive each, extracted here) load, with the package and in a fresh
process without it; a folder saved now loads without it too.

The logits were recorded on one CPU and are recomputed on whichever runs the tests: another instruction set reduces in
another order, so they agree to `tests.helpers.tolerance.assert_logits_close` (eps(dtype) x depth x max|logits|), not
bit for bit. What runs twice on this machine with the same kernel is compared bit for bit. The negative controls show
that the tolerance still catches one flipped bit in one weight and a dropped depth source."""
import gzip
import json
import os
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hf_attnres  # registers the Auto classes, as a user's script does
from hf_attnres.families.registry import SUPPORTED, family_classes
from tests.data.unchanged.record import archive, pack, unpack
from tests.helpers.remote_loading import load_all_in_clean_process
from tests.helpers.tolerance import assert_caught, assert_logits_close, dropped_depth_source, flipped_bit

DATA = Path(__file__).resolve().parents[1] / "data" / "unchanged"
CONFIGS = json.loads((DATA / "configs.json").read_text())
LOGITS = load_file(DATA / "logits.safetensors")
SEED = 0  # record.py's


def recorded_config(family: str, mode: str):
    config_class, _ = family_classes(family)
    return config_class(**CONFIGS[f"{family}.{mode}"])


def build(family: str, mode: str):
    _, model_class = family_classes(family)
    config = recorded_config(family, mode)
    torch.manual_seed(SEED)
    return model_class(config).eval()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Family -> its recorded folder, extracted from its archive."""
    root = tmp_path_factory.mktemp("recorded")
    return {family: unpack(family, root / family) for family in SUPPORTED}


def test_the_fixtures_cover_every_family_in_both_modes():
    assert set(CONFIGS) == {f"{family}.{mode}" for family in SUPPORTED for mode in ("block", "full")}
    assert {p.name for p in (DATA / "folders").iterdir()} == {f"{family}.tar.gz" for family in SUPPORTED}


def test_an_archive_is_its_folder_packed_reproducibly(tmp_path):
    """record.py's `pack` of an extracted folder gives the stored archive's tar bytes again (the gzip stream may differ
    with the zlib build), whatever the files' times and modes: sorted members, no owner, time 0."""
    folder = unpack("llama", tmp_path / "llama")
    for age, path in enumerate(sorted(folder.iterdir())):
        path.chmod(0o600)
        os.utime(path, (1e9 + age, 1e9 + age))
    pack(folder, tmp_path / "again.tar.gz")
    stored = archive("llama").read_bytes()
    assert gzip.decompress((tmp_path / "again.tar.gz").read_bytes()) == gzip.decompress(stored)
    assert stored[4:8] == b"\0\0\0\0"  # the gzip header's time
    with tarfile.open(archive("llama")) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(p.name for p in folder.iterdir())
    assert {(m.mode, m.mtime, m.uid, m.gid, m.uname, m.gname, m.type) for m in members} == {
        (0o644, 0, 0, 0, "", "", tarfile.REGTYPE)}


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_logits_match_the_recorded_ones(family, mode):
    model = build(family, mode)
    assert model.config.attn_res_query_init_std > 0  # random queries: the mix is not an average
    with torch.no_grad():
        logits = model(LOGITS["ids"]).logits
    assert_logits_close(logits, LOGITS[f"{family}.{mode}"], model.config, msg=lambda m: f"{family}.{mode}: {m}")


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_the_recorded_logits_tolerance_catches_a_flipped_bit_and_a_dropped_source(family, mode):
    """The tolerance above is no blanket: the same model with one bit of one weight flipped, or with its output mix
    missing a depth source, misses the recorded logits by many times that tolerance."""
    model = build(family, mode)
    expected = LOGITS[f"{family}.{mode}"]
    with torch.no_grad():
        with flipped_bit(model):
            assert_caught(model(LOGITS["ids"]).logits, expected, model.config, f"{family}.{mode}: a flipped bit")
        with dropped_depth_source():
            assert_caught(model(LOGITS["ids"]).logits, expected, model.config, f"{family}.{mode}: a dropped source")
        assert_logits_close(model(LOGITS["ids"]).logits, expected, model.config)  # both changes undone


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_a_recorded_folder_loads_with_the_package(family, recorded):
    _, model_class = family_classes(family)
    model = model_class.from_pretrained(recorded[family]).eval()
    assert type(model) is model_class
    through_tools = hf_attnres.load(recorded[family]).eval()  # the Auto class, the record checked
    assert type(through_tools) is model_class
    with torch.no_grad():
        logits = model(LOGITS["ids"]).logits
        # the same folder's weights, class and kernel in this process: bit for bit
        assert torch.equal(through_tools(LOGITS["ids"]).logits, logits), family
    assert_logits_close(logits, LOGITS[f"{family}.block"], model.config, msg=lambda m: f"{family}: {m}")


def test_recorded_and_new_folders_load_without_the_package(tmp_path, recorded, monkeypatch):
    """A recorded folder carries the C++ CPU kernel of its time and gives the recorded logits (to the cross-machine
    tolerance: that kernel is compiled for this CPU). A folder saved now carries no C++ kernel (the installed package
    registers it): on CPU it runs the lean path, so it gives what the package gives with backend "torch" bit for bit
    (the same kernel, weights and ids on the same machine, and no op this small is split across threads, so the two
    processes' thread counts do not matter), and the recorded logits to the same tolerance."""
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)  # it would override the backends compared here
    families = sorted(SUPPORTED)
    new, lean = [], {}
    for family in families:
        model = build(family, "block")
        model.save_pretrained(tmp_path / "new" / family)
        new.append(tmp_path / "new" / family)
        model.config.attn_res_backend = "torch"
        with torch.no_grad():
            lean[family] = model(LOGITS["ids"]).logits
    old = [recorded[family] for family in families]
    results = load_all_in_clean_process(old + new, LOGITS["ids"], tmp_path / "run", tmp_path / "hf")
    for folder, family, result in zip(old, families, results):
        assert_logits_close(result["logits"], LOGITS[f"{family}.block"], recorded_config(family, "block"),
                            msg=lambda m, f=folder: f"{f}: {m}")
    for folder, family, result in zip(new, families, results[len(old):]):
        assert torch.equal(result["logits"], lean[family]), folder
        assert_logits_close(result["logits"], LOGITS[f"{family}.block"], recorded_config(family, "block"),
                            msg=lambda m, f=folder: f"{f}: {m}")
