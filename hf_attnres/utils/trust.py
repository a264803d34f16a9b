"""One rule for what a loaded folder may run: our own classes by default, a folder's own code only when asked.

By default only classes installed here load: this package's (model types `kimi_linear_attnres`, `kimi_k3` and
every family's `<model_type>_attnres`, which `import hf_attnres` registers with the Auto classes), transformers' own
(`kimi_linear` and the rest) and transformers' own tokenizers. A folder's own code - an `auto_map` in config.json,
tokenizer_config.json or a processor config, naming a module (`modeling_evil.py` beside the weights) or a Hub
repository - runs only with an explicit `--trust-remote-code`. Folders this package saves carry an `auto_map` to their
generated code files (hf_attnres.folders.remote_code) for machines without attnres; here those entries name a class the
Auto classes already hold, and with `trust_remote_code=False` transformers loads the registered class and never
imports the folder's copy, so they load without the flag (as does a Moonshot Kimi Linear folder's auto_map for its
config and model).

API for every command that loads a folder (compare, train --init-from, convert, push-to-hub, export, plan-memory):

    from hf_attnres.utils.flags import trust_flag
    from hf_attnres.utils.trust import load_kwargs
    trust_remote_code: bool = trust_flag()                         # a command's field: --trust-remote-code, off
    model = AutoModelForCausalLM.from_pretrained(folder, **load_kwargs(folder, args.trust_remote_code))
    tokenizer = AutoTokenizer.from_pretrained(folder, **load_kwargs(folder, args.trust_remote_code))

`load_kwargs(folder, trust)` = `check_folder_code(folder, trust)` (raises UntrustedCodeError naming every entry and
file that would run, when `trust` is False) + `trust_kwargs(trust)` (`{"trust_remote_code": trust}`, to pass on to
transformers, lm-eval's `trust_remote_code=` model argument, ...). `folder_code(folder)` lists those entries without
raising. A name that is not a local folder (a Hub repository id) is not scanned: transformers' own
`trust_remote_code=False` check then applies (it refuses code that no installed class replaces).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..families.registry import ATTN_RES_SUFFIX, SUPPORTED

TRUST_FLAG = "--trust-remote-code"
# Files whose `auto_map` transformers' Auto classes follow
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                "feature_extractor_config.json", "image_processor_config.json", "video_preprocessor_config.json")
# Model types whose config and model classes are installed (ours registered by `import hf_attnres`, or transformers'):
# their config.json auto_map entries for these Auto classes are replaced by the installed classes
INSTALLED_TYPES = ("kimi_k3", "kimi_linear", *(f"{family}{ATTN_RES_SUFFIX}" for family in SUPPORTED))
INSTALLED_AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForCausalLM")


class UntrustedCodeError(ValueError):
    """A folder carries code and --trust-remote-code was not given (the message names the entries and files)."""


def trust_kwargs(trust_remote_code: bool) -> dict:
    """What to pass to transformers' `from_pretrained` (never None: None would prompt, or trust, by transformers'
    own rules)."""
    return {"trust_remote_code": bool(trust_remote_code)}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}  # unreadable: the loader reports it; no auto_map can be followed from it either
    return data if isinstance(data, dict) else {}


def _references(value) -> list[str]:
    """The class references of one auto_map value: "module.Class", "repo--module.Class", or a [slow, fast] pair."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, str) and v]


def _describe(folder: Path, file: str, auto_class: str, reference: str) -> str:
    repo, _, local = reference.rpartition("--")
    module = local.rpartition(".")[0]
    where = f"from the Hub repository {repo}" if repo else (f"{module}.py" if (folder / f"{module}.py").is_file()
                                                            else f"{module}.py, not in the folder")
    return f"{file} auto_map {auto_class} -> {reference} ({where})"


def folder_code(folder) -> list[str]:
    """Every auto_map entry of `folder` whose code would run with trust_remote_code=True and that no installed class
    replaces, described as "config.json auto_map AutoModelForCausalLM -> modeling_evil.Foo (modeling_evil.py)"."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    config = _read_json(folder / "config.json")
    installed = config.get("model_type") in INSTALLED_TYPES
    found = []
    for file in CODE_CONFIGS:
        auto_map = _read_json(folder / file).get("auto_map") if (folder / file).is_file() else None
        if isinstance(auto_map, (list, tuple)):  # an old tokenizer_config.json: [slow, fast] for AutoTokenizer
            auto_map = {"AutoTokenizer": auto_map}
        if not isinstance(auto_map, dict):
            continue
        for auto_class, value in auto_map.items():
            if file == "config.json" and installed and auto_class in INSTALLED_AUTO_CLASSES:
                continue  # replaced by the registered class (with trust_remote_code=False it is never imported)
            found += [_describe(folder, file, auto_class, ref) for ref in _references(value)]
    return found


def check_folder_code(folder, trust_remote_code: bool) -> list[str]:
    """Refuse a folder that carries code unless `trust_remote_code`; returns the entries that will run (empty: none)."""
    found = folder_code(folder)
    if found and not trust_remote_code:
        raise UntrustedCodeError(f"folder {folder} carries code ({'; '.join(found)}); pass {TRUST_FLAG} to run it")
    return found


def load_kwargs(folder, trust_remote_code: bool) -> dict:
    """check_folder_code, then the keyword arguments for `from_pretrained`."""
    check_folder_code(folder, trust_remote_code)
    return trust_kwargs(trust_remote_code)


TRUST_HELP = ("run code that a model folder carries (an auto_map naming its own modules); off by default: only this "
              "package's and transformers' own classes load")
