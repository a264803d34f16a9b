"""A Kimi-Linear-only trainer given another family's folder (plain or upcycled Llama): refused naming that family,
launched or not (WORLD_SIZE unset and 2), never loaded as Kimi Linear, nothing written."""
import pytest


def assert_other_familys_folder_refused(main, tmp_path, monkeypatch, upcycled: bool) -> None:
    from hf_attnres import upcycle
    from tests.families.tiny import source_model

    model = source_model("llama")
    (upcycle(model, "block", block_size=2) if upcycled else model).save_pretrained(tmp_path / "llama")
    for world in (None, "2"):
        if world is None:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("WORLD_SIZE", world)
        with pytest.raises(SystemExit, match=r"is a llama(_attnres)? checkpoint \(llama family\).*Kimi Linear") as info:
            main(["--model", str(tmp_path / "llama"), "--output-dir", str(tmp_path / "out")])
        assert "--init-from" in str(info.value)
    assert not (tmp_path / "out").exists()
