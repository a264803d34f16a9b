"""Load a saved folder as a user without this package would: a fresh process in which `attnres` (and triton: "only
torch + transformers installed") cannot be imported, through the Auto classes with `trust_remote_code=True`."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

CHILD = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = json.loads(sys.argv[1])
    ids = torch.load(spec["ids"])
    results = []
    for source in spec["sources"]:
        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        imported = [m for m in sys.modules if m.split(".")[0] in ("hf_attnres", "triton")]
        assert not imported, "hf_attnres/triton got imported"
        with torch.no_grad():
            result = {"logits": model(ids).logits}
            if spec["generate"]:
                result["generated"] = model.generate(ids, max_new_tokens=spec["generate"], do_sample=False)
            if spec["recompute"]:  # greedy decoding without the cache: every step recomputes the whole sequence
                result["recomputed"] = model.generate(ids, max_new_tokens=spec["generate"], do_sample=False,
                                                      use_cache=False)
        if spec["tokenizer"]:  # no trust_remote_code: a plain tokenizer must load without any prompt
            result["tokens"] = AutoTokenizer.from_pretrained(source)("w5 w7 w9")["input_ids"]
        results.append(result)
    torch.save(results, spec["out"])
    """
)


def block_packages(folder: Path, names=("hf_attnres", "triton")) -> Path:
    """A folder put first on sys.path whose packages fail to import as missing packages do."""
    for name in names:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\")\n")
    return folder


def fake_hub_repo(folder: Path, hub_cache: Path, repo_id: str = "someone/tiny-attnres") -> str:
    """Put `folder` in a Hugging Face cache as revision main of `repo_id` (offline, the loader takes the Hub path:
    files are fetched one by one, and each module's imports are checked)."""
    commit = "0" * 40
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo_id


def load_in_clean_process(source, ids: torch.Tensor, work: Path, hf_home: Path, tokenizer: bool = False) -> dict:
    """Run the child in a fresh interpreter: no project on the path, attnres and triton blocked, offline."""
    return load_all_in_clean_process([source], ids, work, hf_home, tokenizer)[0]


def load_all_in_clean_process(sources, ids: torch.Tensor, work: Path, hf_home: Path, tokenizer: bool = False,
                              generate: int = 0, recompute: bool = False) -> list[dict]:
    """`load_in_clean_process` for several folders in one fresh interpreter (one start-up of torch and transformers);
    `generate`: also greedy-decode that many new tokens; `recompute`: and again without the cache."""
    work.mkdir(parents=True, exist_ok=True)
    torch.save(ids, work / "ids.pt")
    (work / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(block_packages(work / "blocked")), HF_HOME=str(hf_home), HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    spec = dict(sources=[str(s) for s in sources], ids=str(work / "ids.pt"), out=str(work / "out.pt"),
                tokenizer=tokenizer, generate=generate, recompute=recompute)
    result = subprocess.run([sys.executable, str(work / "child.py"), json.dumps(spec)], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)  # an interactive prompt fails instead of hanging
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(work / "out.pt")


def code_files(family: str) -> dict:
    """A family's saved folder's code file of each auto_map entry, by the package's module names, and its files."""
    from hf_attnres.families.registry import family_classes
    from hf_attnres.folders.remote_code import code_file_names

    config_class, model_class = family_classes(family)
    modeling = model_class.__module__.rpartition(".")[2]
    configuration = config_class.__module__.rpartition(".")[2]
    return {"AutoConfig": f"{configuration}.{config_class.__name__}",
            "AutoModelForCausalLM": f"{modeling}.{model_class.__name__}",
            "files": set(code_file_names(model_class.__module__))}


def auto_map(folder: Path) -> dict:
    return json.loads((Path(folder) / "config.json").read_text()).get("auto_map", {})


def write_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(256)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0", pad_token="w0").save_pretrained(folder)
    return folder
