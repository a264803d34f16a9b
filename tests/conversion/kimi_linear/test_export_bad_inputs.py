"""Bad input to `attnres export` (in-process main(), exit code and message): model folders whose safetensors headers
lie or whose weights are not a float dtype, refused by name (file and tensor) with nothing written."""
from __future__ import annotations

import pytest

from hf_attnres.cli.export import EXIT_ERROR
from hf_attnres.cli.export import main as export_main
from tests.helpers.bad_input_fixtures import damaged_copy, snapshot
from tests.helpers.safetensors_damage import HEADER_DAMAGE

CASES = {name: HEADER_DAMAGE[name] for name in ("header_offsets_reversed", "header_duplicate_name",
                                                "header_shape_overflows", "header_nested_200000_deep",
                                                "lm_head_int32")}


@pytest.mark.parametrize("damage, named", CASES.values(), ids=CASES.keys())
def test_export_refuses_a_lying_folder(saved_model, capsys, tmp_path, damage, named):
    folder = damaged_copy(saved_model, tmp_path, damage)
    before, out = snapshot(folder), tmp_path / "out"
    assert export_main([str(folder), str(out), "--to", "kimi-linear", "--no-progress"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing was written" in err, err
    for word in [".safetensors", *named]:
        assert word in err, f"{word!r} not in {err!r}"
    assert snapshot(folder) == before and not out.exists()
