"""The families tables of docs/FAMILIES.md, written from the registry (`hf_attnres.families.registry`): the supported
families from their declarations, how each one's layer differs from Llama's (its declared data), and the refused ones
with their reasons.

    python -m hf_attnres.utils.families_doc            # rewrite the tables between their markers
    python -m hf_attnres.utils.families_doc --check    # exit 1 when the file's tables differ, write nothing
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_attnres.families.registry import DECLARATIONS, REFUSED
from hf_attnres.folders.atomic_io import write_text_atomic

DOC = Path(__file__).resolve().parents[2] / "docs" / "FAMILIES.md"
BEGIN = "<!-- families tables: written by `python -m hf_attnres.utils.families_doc`, do not edit by hand -->"
END = "<!-- end of the families tables -->"


def differences(family) -> str:
    """How a family's layer differs from Llama's `h + attn(norm1(h))`, `h + mlp(norm2(h))`, from its declaration's
    data (`hf_attnres.families.declaration.Family`); "" where it does not."""
    listed = " / ".join
    parts = []
    if family.input_norms:
        parts.append(f"{listed(f'`{name}`' for name in family.input_norms)} read the attention and the MLP mix")
    if family.output_modules:
        parts.append(f"{listed(f'`{name}`' for name in family.output_modules)} end the attention and the MLP output: "
                     "part of the sub-layer, so the source it adds is their output and no mix reads past them")
    if family.embedding is not None:
        scale = f", scaled by `{family.embedding_scale}`" if family.embedding_scale else ""
        parts.append(f"the first source is its embedding `{family.embedding.__name__}`{scale}")
    if family.rotary_per_layer_type:
        parts.append("one rotary base per layer type (`config.layer_types`)")
    parts += [f"`{flag}` is refused: {reason}" for flag, reason in family.refused_config_flags.items()]
    return "; ".join(parts)


def tables() -> str:
    """The supported and refused tables, as Markdown."""
    rows = ["| Family | `model_type` with AttnRes | Checkpoints | transformers classes extended | Final norm fused "
            "into the mix | Code |", "|---|---|---|---|---|---|"]
    for model_type, (package, family) in sorted(DECLARATIONS.items()):
        classes = f"`{family.config.__name__}`, `{family.causal_lm.__name__}`"
        code = "generated" if family.generated else "written by hand"
        folder = package.rpartition(".")[2]
        rows.append(f"| {family.title} (`{model_type}`) | `{family.attn_res_model_type}` | {family.about} | {classes} "
                    f"| {'yes' if family.fusable_norm else 'no'} | {code}: `hf_attnres/families/{folder}/` |")
    by_title = sorted((family for _, family in DECLARATIONS.values()), key=lambda family: family.title)
    differing = [f"- {family.title}: {text}." for family in by_title if (text := differences(family))]
    refused = ["| `model_type` | Why not |", "|---|---|"]
    refused += [f"| `{model_type}` | {reason} |" for model_type, reason in sorted(REFUSED.items())]
    return "\n".join(["### Supported", "", *rows, "", "### Where a layer differs from Llama's", "",
                      "Declared as data in the family's modular file and run by `hf_attnres.core`:", "", *differing, "",
                      "### Refused", "", *refused])


def rendered(text: str) -> str:
    """`text` with the tables between the markers replaced by the registry's; ValueError naming a missing marker."""
    for marker in (BEGIN, END):
        if marker not in text:
            raise ValueError(f"{DOC}: the marker {marker!r} is missing")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{tables()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_attnres.utils.families_doc",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the tables are stale, write nothing")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    try:
        want = rendered(text)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if text == want:
        return 0
    if args.check:
        print(f"{DOC}: the families tables are stale, run `python -m hf_attnres.utils.families_doc`", file=sys.stderr)
        return 1
    write_text_atomic(DOC, want)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
