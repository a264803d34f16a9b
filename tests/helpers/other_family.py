"""A --model folder neither pipeline trainer can train: a family's plain checkpoint (no AttnRes tensors yet). Refused
in one line naming the folder and the command that upcycles it, launched or not (WORLD_SIZE unset and 2), nothing
written."""
import pytest


def assert_plain_folder_refused(main, tmp_path, monkeypatch) -> None:
    from tests.families.tiny import source_model

    source_model("llama").save_pretrained(tmp_path / "model")
    for world in (None, "2"):
        if world is None:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("WORLD_SIZE", world)
        with pytest.raises(SystemExit) as info:
            main(["--model", str(tmp_path / "model"), "--output-dir", str(tmp_path / "out")])
        message = str(info.value)
        assert message.startswith(f"error: --model {tmp_path / 'model'}: a plain llama checkpoint"), message
        assert "--upcycle block" in message and "\n" not in message, message
    assert not (tmp_path / "out").exists()
