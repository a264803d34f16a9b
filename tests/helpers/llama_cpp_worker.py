"""Runs llama.cpp (through llama_cpp) in a process of its own, for the serving tests.

A llama.cpp build can abort the whole process (a GGML_ASSERT on an AMX Xeon, for one), and inside pytest that would
take the suite down with no summary. So the tests load and evaluate GGUF files here, in a child, and read back:
  python llama_cpp_worker.py REQUEST.json RESULT.npz
REQUEST: {"model": path, "prompts": [text, ...], "ids": [[id, ...], ...], "greedy_tokens": n}
RESULT:  tokens_<i> (llama.cpp's tokenization of prompt i), logits_<i> ([len(ids[i]), vocab] for ids[i]) and
         greedy_<i> (n greedy tokens after ids[i]; n = 0 skips generation).
Imports nothing of attnres or the tests: it is only llama.cpp's side of the comparison.
"""
from __future__ import annotations

import json
import sys

import numpy as np


def main(request_path: str, result_path: str) -> None:
    import llama_cpp

    request = json.loads(open(request_path, encoding="utf-8").read())
    llm = llama_cpp.Llama(model_path=request["model"], logits_all=True, n_ctx=128, n_batch=128, n_threads=1, seed=0,
                          verbose=False)
    result = {}
    for i, (prompt, ids) in enumerate(zip(request["prompts"], request["ids"])):
        result[f"tokens_{i}"] = np.array(llm.tokenize(prompt.encode(), add_bos=False, special=False), dtype=np.int64)
        llm.reset()
        llm.eval(ids)
        result[f"logits_{i}"] = np.array(llm.scores[: len(ids)], dtype=np.float64)
        greedy = []
        for _ in range(request["greedy_tokens"]):
            greedy.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([greedy[-1]])
        result[f"greedy_{i}"] = np.array(greedy, dtype=np.int64)
    with open(result_path, "wb") as out:
        np.savez(out, **result)


if __name__ == "__main__":
    main(*sys.argv[1:3])
