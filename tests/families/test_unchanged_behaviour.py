"""The model's behaviour against fixtures recorded before the package was reorganised (tests/data/unchanged, written
by its record.py): every family's tiny model in block and full mode with random pseudo-queries gives the recorded
logits bit for bit, and the folders saved then (stored as one archive each, extracted here) load, with the package and
in a fresh process without it; a folder saved now loads without it too."""
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

DATA = Path(__file__).resolve().parents[1] / "data" / "unchanged"
CONFIGS = json.loads((DATA / "configs.json").read_text())
LOGITS = load_file(DATA / "logits.safetensors")
SEED = 0  # record.py's


def build(family: str, mode: str):
    config_class, model_class = family_classes(family)
    torch.manual_seed(SEED)
    return model_class(config_class(**CONFIGS[f"{family}.{mode}"])).eval()


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
def test_logits_are_bit_identical_to_the_recorded_ones(family, mode):
    model = build(family, mode)
    assert model.config.attn_res_query_init_std > 0  # random queries: the mix is not an average
    with torch.no_grad():
        logits = model(LOGITS["ids"]).logits
    assert torch.equal(logits, LOGITS[f"{family}.{mode}"]), (logits - LOGITS[f"{family}.{mode}"]).abs().max()


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_a_recorded_folder_loads_with_the_package(family, recorded):
    _, model_class = family_classes(family)
    model = model_class.from_pretrained(recorded[family]).eval()
    assert type(model) is model_class
    through_tools = hf_attnres.load(recorded[family]).eval()  # the Auto class, the record checked
    assert type(through_tools) is model_class
    with torch.no_grad():
        assert torch.equal(model(LOGITS["ids"]).logits, LOGITS[f"{family}.block"]), family
        assert torch.equal(through_tools(LOGITS["ids"]).logits, LOGITS[f"{family}.block"]), family


def test_recorded_and_new_folders_load_without_the_package(tmp_path, recorded, monkeypatch):
    """A recorded folder carries the C++ CPU kernel of its time and gives the recorded logits bit for bit. A folder
    saved now carries no C++ kernel (the installed package registers it): on CPU it runs the lean path, so it gives
    what the package gives with backend "torch", bit for bit, and the recorded logits up to fp32 reassociation
    (tests/kernels/test_mix_cpu_fused.py's tolerance)."""
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
        assert torch.equal(result["logits"], LOGITS[f"{family}.block"]), folder
    for folder, family, result in zip(new, families, results[len(old):]):
        assert torch.equal(result["logits"], lean[family]), folder
        torch.testing.assert_close(result["logits"], LOGITS[f"{family}.block"], rtol=1e-5, atol=1e-5)
