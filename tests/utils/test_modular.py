"""The family code generator (hf_attnres/utils/modular.py): every generated file is what its declaration generates now
(a hand edit or a changed generator fails here), a stale or missing file is named and nothing is written under
--check, and a modular file without a declaration is one line naming the file."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

from hf_attnres.utils import modular

GENERATED = [folder for folder in modular.modular_files() if modular.generate(folder)]


@pytest.mark.parametrize("folder", GENERATED)
def test_generated_files_are_current(folder):
    for name, text in modular.generate(folder).items():
        path = modular.FAMILIES_DIR / folder / name
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `{modular.COMMAND}`"


@pytest.mark.parametrize("folder", GENERATED)
def test_a_rotary_family_is_declared_in_at_most_40_lines(folder):
    lines = modular.modular_files()[folder].read_text(encoding="utf-8").count("\n")
    assert lines <= 40


def test_every_rotary_family_is_generated_and_kimi_linear_is_not():
    assert set(GENERATED) == set(modular.modular_files()) - {"kimi_linear"}
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma3", "phi3"} <= set(GENERATED)


@pytest.fixture
def families_copy(tmp_path, monkeypatch):
    copy = tmp_path / "families"
    shutil.copytree(modular.FAMILIES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(modular, "FAMILIES_DIR", copy)
    return copy


def test_check_names_a_stale_and_a_missing_file_and_writes_nothing(families_copy, capsys):
    edited = families_copy / "llama" / "modeling_llama_attnres.py"
    edited.write_text(edited.read_text() + "# a hand edit\n")
    missing = families_copy / "phi3" / "configuration_phi3_attnres.py"
    missing.unlink()
    assert modular.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert str(edited) in err and str(missing) in err and len(err.splitlines()) == 2
    assert edited.read_text().endswith("# a hand edit\n") and not missing.exists()


def test_regenerating_restores_the_files_and_touches_no_other(families_copy):
    edited = families_copy / "qwen3" / "configuration_qwen3_attnres.py"
    want = edited.read_text()
    edited.write_text("broken")
    before = {p: p.stat().st_mtime_ns for p in families_copy.rglob("*.py") if p != edited}
    assert modular.main([]) == 0
    assert edited.read_text() == want
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert modular.main(["--check"]) == 0


def test_a_declaration_change_changes_the_generated_text(families_copy):
    path = families_copy / "llama" / "modular_llama_attnres.py"
    path.write_text(path.read_text().replace("fusable_norm=True", "fusable_norm=False"))
    text = modular.generate("llama")["modeling_llama_attnres.py"]
    assert "fusable_norm" not in text


def test_the_declared_data_becomes_the_classes_attributes_and_only_where_declared():
    gemma = modular.generate("gemma3")
    modeling, config = gemma["modeling_gemma3_attnres.py"], gemma["configuration_gemma3_attnres.py"]
    for line in ['attn_res_input_norms = ("input_layernorm", "pre_feedforward_layernorm")',
                 'attn_res_output_modules = ("post_attention_layernorm", "post_feedforward_layernorm")',
                 "rotary_per_layer_type = True", "embedding_class = Gemma3TextScaledWordEmbedding",
                 'embedding_scale = "sqrt_hidden_size"']:
        assert f"\n    {line}" in modeling
    assert 'attn_res_refused_flags = {\n        "use_bidirectional_attention": ' in config
    assert "`use_bidirectional_attention` is refused: an embedding model" in config  # and the docstring says so
    llama = "".join(modular.generate("llama").values())
    assert not any(name in llama for name in ("attn_res_input_norms", "attn_res_output_modules", "rotary_per_layer",
                                              "embedding_class", "embedding_scale", "attn_res_refused_flags"))


def test_what_data_cannot_say_a_class_body_adds_to_the_generated_class(families_copy):
    path = families_copy / "llama" / "modular_llama_attnres.py"
    text = path.read_text().replace("    LlamaAttention,\n", "    LlamaAttention,\n    LlamaMLP,\n")
    path.write_text(text + '\n\nclass LlamaAttnResModel:\n    """A probe."""\n\n    def probe(self):\n'
                    "        return LlamaMLP\n")
    modeling = modular.generate("llama")["modeling_llama_attnres.py"]
    model_class = modeling[modeling.index("class LlamaAttnResModel("):modeling.index("class LlamaAttnResForCausalLM")]
    assert '    """A probe."""' in model_class and "    def probe(self):\n        return LlamaMLP" in model_class
    assert "    LlamaMLP,\n" in modeling


def test_a_declared_class_the_file_does_not_import_is_named(families_copy):
    path = families_copy / "llama" / "modular_llama_attnres.py"
    path.write_text(path.read_text().replace("fusable_norm=True", "fusable_norm=True, embedding=ScaledEmbedding"))
    with pytest.raises(modular.DeclarationError,
                       match="modular_llama_attnres.py: embedding='ScaledEmbedding' is not a class the file imports"):
        modular.generate("llama")


@pytest.mark.parametrize("text", ["", "FAMILY = 3\n", "from x import Family\nfamily = Family(name='X')\n"])
def test_a_modular_file_without_a_declaration_is_named(families_copy, text):
    folder = families_copy / "broken"
    folder.mkdir()
    (folder / "modular_broken_attnres.py").write_text(text)
    with pytest.raises(modular.DeclarationError, match="modular_broken_attnres.py: no `FAMILY = Family"):
        modular.generate("broken")


def test_a_decoder_layer_not_imported_by_name_is_named(families_copy):
    folder = families_copy / "unnamed"
    folder.mkdir()
    (folder / "modular_unnamed_attnres.py").write_text(
        "import transformers\nFAMILY = Family(model_type='x', name='X', decoder_layer=XDecoderLayer)\n")
    with pytest.raises(modular.DeclarationError, match="modular_unnamed_attnres.py: the decoder layer 'XDecoderLayer'"):
        modular.generate("unnamed")


def test_an_unknown_flag_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        modular.main(["--chek"])
    assert exit_info.value.code == 2 and "--chek" in capsys.readouterr().err


def test_a_class_body_keeps_at_most_two_blank_lines_in_a_row(families_copy):
    path = families_copy / "llama" / "modular_llama_attnres.py"
    path.write_text(path.read_text() + '\n\nclass LlamaAttnResModel:\n    x = 1\n\n\n\n\n    y = 2\n')
    modeling = modular.generate("llama")["modeling_llama_attnres.py"]
    assert "    x = 1\n\n\n    y = 2\n" in modeling and "\n\n\n\n" not in modeling
    compile(modeling, "modeling_llama_attnres.py", "exec")


@pytest.mark.parametrize("folder", GENERATED)
def test_every_generated_file_opens_with_the_shared_note_and_its_docstring(folder):
    for name, text in modular.generate(folder).items():
        first, rest = text.split("\n", 1)
        assert first == modular.codegen.generated_note(modular.COMMAND, source=f"modular_{folder}_attnres.py")
        assert rest.startswith('"""') and ast.get_docstring(ast.parse(text)), name


def test_the_script_loads_the_shared_formatter_by_path_and_finds_the_files_current():
    """Run as a script (before `import hf_attnres` could work), the generator loads codegen and its writer by path."""
    script = modular.FAMILIES_DIR.parent / "utils" / "modular.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300,
                            env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
                            cwd=modular.FAMILIES_DIR.parent.parent)
    assert result.returncode == 0, result.stderr[-2000:]
