"""Generate a family's configuration and modeling files from its declaration (`modular_<folder>_attnres.py`), as
transformers' modular converter generates `modeling_*.py` from `modular_*.py`.

    python hf_attnres/utils/modular.py            # rewrite every generated family's stale files
    python hf_attnres/utils/modular.py --check    # exit 1 naming each stale file, write nothing

The generator reads the modular files as text (their syntax trees) and imports nothing of this package that needs
the families, so it runs before a new family's files exist (`import hf_attnres` registers every declared family, and
would need them): its formatter and writer, shared with the generator of a saved folder's code
(`hf_attnres/folders/codegen.py`), it loads by path when run as a script. The text is a function of the modular file
alone (`generate`), so a test regenerates it in memory and compares.

The declaration is `FAMILY = Family(...)` (`hf_attnres.families.declaration`), its classes named as imported. Its
data fields become class attributes the core runs (`input_norms` -> the layer's `attn_res_input_norms`, and so on),
written only where the declaration gives them. A class of the modular file named as a generated class gives its body
to that class: its docstring replaces the default one, its other statements follow the default attributes. Names the
modular file imports from the family's transformers modeling module, beyond the declared classes, are imported by the
modeling file.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

FAMILIES_DIR = Path(__file__).resolve().parent.parent / "families"
FOLDERS_DIR = FAMILIES_DIR.parent / "folders"


def _codegen():
    """`hf_attnres/folders/codegen.py` (it imports nothing of the package but its sibling `atomic_io`), loaded by its
    path."""
    spec = importlib.util.spec_from_file_location("_attnres_generator_codegen", FOLDERS_DIR / "codegen.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass reads its module's namespace
    spec.loader.exec_module(module)
    return module


if __package__:  # imported as hf_attnres.utils.modular: the package is there
    from ..folders import codegen
else:  # run as a script, before `import hf_attnres` can work
    codegen = _codegen()
LINE_LENGTH = codegen.LINE_LENGTH
COMMAND = "python hf_attnres/utils/modular.py"
CLASS_FIELDS = ("config", "decoder_layer", "pretrained_model", "causal_lm", "norm", "rotary", "attention", "embedding")
# the declaration's data fields and their values where it does not give them (`Family`'s defaults)
DATA_FIELDS = {"label": "", "fusable_norm": False, "generated": True, "input_norms": (), "output_modules": (),
               "embedding_scale": None, "rotary_per_layer_type": False, "refused_config_flags": {}}


class DeclarationError(ValueError):
    """A modular file without a readable `FAMILY = Family(...)`; the message names the file."""


def modular_files() -> dict[str, Path]:
    """folder -> its modular file, for every family folder that has one."""
    return {path.parent.name: path for path in sorted(FAMILIES_DIR.glob("*/modular_*_attnres.py"))}


def _value(node: ast.expr):
    """A keyword's value: a name as its text (a class), a literal as its value, anything else as its source."""
    if isinstance(node, ast.Name):
        return node.id
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def read_declaration(path: Path) -> SimpleNamespace:
    """The keywords of the modular file's `FAMILY = Family(...)`: literals as written, classes by name; `module`: the
    transformers module the decoder layer is imported from."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    call = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                 and [getattr(t, "id", None) for t in node.targets] == ["FAMILY"]
                 and isinstance(node.value, ast.Call)), None)
    if call is None:
        raise DeclarationError(f"{path}: no `FAMILY = Family(...)` declaration")
    fields = dict.fromkeys(CLASS_FIELDS) | DATA_FIELDS
    for keyword in call.keywords:
        fields[keyword.arg] = _value(keyword.value)
    family = SimpleNamespace(**fields)
    family.imports = {alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                      for alias in node.names}
    family.module = family.imports.get(family.decoder_layer)
    family.title = family.label or family.name
    family.config_name, family.causal_lm_name = f"{family.name}AttnResConfig", f"{family.name}AttnResForCausalLM"
    family.attn_res_model_type = f"{family.model_type}_attnres"
    return family


def class_bodies(path: Path) -> dict[str, tuple[str | None, str]]:
    """class name -> (docstring or None, the body's other lines as written) of the modular file's classes."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    bodies = {}
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ClassDef):
            continue
        doc = ast.get_docstring(node, clean=False)
        first = node.body[0]
        start = first.end_lineno if doc is not None else first.lineno - 1
        rest = "\n".join(lines[start:node.end_lineno]).strip("\n")
        bodies[node.name] = (doc, rest)
    return bodies


def listed(modules: tuple[str, ...]) -> str:
    return " / ".join(f"`{module}`" for module in modules)


def generated_note(folder: str) -> str:
    """The first line of a generated file: a comment above its docstring, so a saved folder's copy of the file (which
    has no modular file to edit) leaves it out with the package's other file-level comments (remote_code.py)."""
    return codegen.generated_note(COMMAND, source=f"modular_{folder}_attnres.py")


def configuration_text(family: SimpleNamespace, folder: str, bodies: dict) -> str:
    name, config = family.config_name, family.config
    doc = (f"`{config}` ({family.about})\n    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, "
           "`attn_res_backend`, ... (`ATTN_RES_FIELDS`),\n    validated at construction. "
           f"`attn_res_mode=\"standard\"` is {family.title} itself.")
    refused = family.refused_config_flags
    if refused:
        reasons = " ".join(f"`{flag}` is refused: {reason}." for flag, reason in refused.items())
        doc += "\n\n" + codegen.wrap(reasons, codegen.INDENT) + "\n" + codegen.INDENT
    attributes = [f'    model_type = "{family.attn_res_model_type}"', f'    attn_res_family = "{family.model_type}"']
    if refused:
        attributes.append(codegen.assignment("attn_res_refused_flags", refused))
    about = f"{family.title} with Attention Residuals: `{config}` plus the AttnRes fields (`AttnResConfigMixin`)."
    return codegen.file_header(generated_note(folder), about) + "\n".join([
        "from huggingface_hub.dataclasses import strict",
        f"from transformers import {config}",
        "",
        "from hf_attnres.core.config import AttnResConfigMixin",
        "",
        "",
        codegen.class_text(f"@strict\nclass {name}(AttnResConfigMixin, {config}):", doc, attributes, bodies.get(name),
                           prefix="r"),
        "",
        "",
        codegen.exports([name]),
        "",
    ])


def modeling_text(family: SimpleNamespace, folder: str, bodies: dict, extras: list[str]) -> str:
    n, title = family.name, family.title
    layer, pretrained, model = f"{n}AttnResDecoderLayer", f"{n}AttnResPreTrainedModel", f"{n}AttnResModel"
    causal_lm, config = family.causal_lm_name, family.config_name
    declared = [family.decoder_layer, family.pretrained_model, family.causal_lm, family.norm, family.rotary,
                family.attention, family.embedding]
    imported = {}
    for cls in sorted({cls for cls in declared if cls is not None} | set(extras)):
        imported.setdefault(family.imports[cls], []).append(cls)
    import_lines = [codegen.from_line(module, {(cls, None) for cls in imported[module]}) for module in sorted(imported)]
    norm = family.norm
    policy = [f"    fusable_norm = {norm}  # Llama's RMSNorm formula: the mix kernels may apply it fused"] \
        if family.fusable_norm else []
    differs = []
    if family.input_norms:
        policy.append(codegen.assignment("attn_res_input_norms", family.input_norms))
        differs.append(f"{listed(family.input_norms)} read the mixes")
    if family.output_modules:
        policy.append(codegen.assignment("attn_res_output_modules", family.output_modules))
        differs.append(f"{listed(family.output_modules)} end each sub-layer's output")
    layer_doc = (f"{title}'s decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`)"
                 + (": " + ", and ".join(differs) if differs else "") + ".")
    model_attributes = [f"    fusable_norm = {norm}"] if family.fusable_norm else []
    if family.rotary_per_layer_type:
        model_attributes.append("    rotary_per_layer_type = True  # a rotary base per type of `config.layer_types`")
    if family.embedding is not None:
        model_attributes.append(f"    embedding_class = {family.embedding}")
    if family.embedding_scale is not None:
        model_attributes.append(codegen.assignment("embedding_scale", family.embedding_scale))
    record = []
    if family.attention is not None:
        record = ['    # hidden states are collected by the model itself: what a layer "outputs" depends on the '
                  'AttnRes mode', f'    _can_record_outputs = {{"attentions": {family.attention}}}']
    classes = [
        codegen.class_text(f"class {layer}(AttnResDecoderLayerMixin, {family.decoder_layer}):", layer_doc, policy,
                           bodies.get(layer)),
        codegen.class_text(f"class {pretrained}(AttnResPreTrainedMixin, {family.pretrained_model}):", "",
                           [f"    config: {config}", f"    config_class = {config}",
                            f'    _no_split_modules = ["{layer}"]', *record], bodies.get(pretrained)),
        codegen.class_text(f"class {model}(AttnResDecoderModel, {pretrained}):", "",
                           [codegen.fit(f"    decoder_layer_class, norm_class, rotary_class = {layer}, {norm}, "
                                        f"{family.rotary}"), *model_attributes],
                           bodies.get(model)),
        codegen.class_text(f"class {causal_lm}(AttnResDecoderForCausalLM, {pretrained}, {family.causal_lm}):", "",
                           [f"    model_class = {model}"], bodies.get(causal_lm)),
    ]
    about = f"{title} with Attention Residuals: {title}, except the residual.\n\n" + codegen.wrap(
        f"Every module ({title}'s attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the "
        "decoder layer mixes the depth sources before its two sub-layers and the model mixes them before the final "
        "norm (`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).")
    return codegen.file_header(generated_note(folder), about) + "\n".join([
        *import_lines,
        "",
        "from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin",
        "from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel",
        "from hf_attnres.core.model import AttnResPreTrainedMixin",
        "",
        f"from .configuration_{folder}_attnres import {config}",
        "",
        "",
        "\n\n\n".join(classes),
        "",
        "",
        codegen.exports([layer, pretrained, model, causal_lm]),
        "",
    ])


def generate(folder: str) -> dict[str, str]:
    """{file name: text} of a generated family's configuration and modeling files ({} for a hand-written family)."""
    path = modular_files()[folder]
    family = read_declaration(path)
    if not family.generated:
        return {}
    if family.module is None:
        raise DeclarationError(f"{path}: the decoder layer {family.decoder_layer!r} is not imported by name")
    for name in CLASS_FIELDS:
        cls = getattr(family, name)
        if cls is not None and cls not in family.imports:
            raise DeclarationError(f"{path}: {name}={cls!r} is not a class the file imports by name")
    bodies = class_bodies(path)
    declared = {getattr(family, name) for name in CLASS_FIELDS}
    # what else the file imports from the family's transformers modeling module
    extras = [name for name, module in family.imports.items() if module == family.module and name not in declared]
    # a class body from the modular file comes as written: its blank lines are cut as the folder's generator cuts them
    texts = {f"configuration_{folder}_attnres.py": configuration_text(family, folder, bodies),
             f"modeling_{folder}_attnres.py": modeling_text(family, folder, bodies, extras)}
    return {name: codegen.collapse_blank_lines(text) for name, text in texts.items()}


def stale_files() -> list[Path]:
    """The generated files whose text differs from what their declaration generates now."""
    stale = []
    for folder in modular_files():
        for name, text in generate(folder).items():
            path = FAMILIES_DIR / folder / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="name the stale generated files (exit 1), write nothing")
    args = parser.parse_args(argv)
    stale = stale_files()
    if args.check:
        for path in stale:
            print(f"{path}: stale, regenerate with `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for folder in modular_files():
        for name, text in generate(folder).items():
            if codegen.write_generated(FAMILIES_DIR / folder / name, text):
                print(f"wrote {FAMILIES_DIR / folder / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
