"""A --model folder neither pipeline trainer can train: a family's plain checkpoint (no AttnRes tensors yet) or an
AttnRes model with tied embeddings (the embedding and lm_head sit on different stages). Refused in one line naming
the folder and why, launched or not (WORLD_SIZE unset and 2), nothing written."""
import re

import pytest

UNTRAINABLE = {"plain": r"a plain llama checkpoint.*--upcycle block",
               "tied": r"tie_word_embeddings=True is not supported by the pipeline trainers"}


def assert_untrainable_folder_refused(main, tmp_path, monkeypatch, case: str) -> None:
    from tests.families.tiny import attn_res_model, source_model

    model = source_model("llama") if case == "plain" else attn_res_model("gemma3_text", "block")
    assert case == "plain" or model.config.tie_word_embeddings  # Gemma 3 ties them by default
    model.save_pretrained(tmp_path / "model")
    for world in (None, "2"):
        if world is None:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("WORLD_SIZE", world)
        with pytest.raises(SystemExit) as info:
            main(["--model", str(tmp_path / "model"), "--output-dir", str(tmp_path / "out")])
        message = str(info.value)
        assert message.startswith(f"error: --model {tmp_path / 'model'}") and "\n" not in message, message
        assert re.search(UNTRAINABLE[case], message), message
    assert not (tmp_path / "out").exists()
