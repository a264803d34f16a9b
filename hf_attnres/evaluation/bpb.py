"""Gold-answer bits per byte: how well a model predicts the reference answer, in bits per UTF-8 byte.

At small scale accuracy sits at chance and says nothing; the log-likelihood of the gold answer still moves smoothly
with model quality (OLMo's and DataDecide's small-scale evaluations use it). Each *_bpb task is an lm-eval
`loglikelihood` task: context = the benchmark's question in cloze form, continuation = the gold answer; this module
gives the documents' (context, target) and turns the log-likelihood into bits per byte.
"""
from __future__ import annotations

import math


def scored_text(context: str, target: str) -> str:
    """The text lm-eval actually scores: it moves the context's trailing whitespace onto the continuation."""
    return context[len(context.rstrip()):] + target


def bits_per_byte(loglikelihood: float, context: str, target: str) -> float:
    return -loglikelihood / math.log(2) / len(scored_text(context, target).encode("utf-8"))


def process_results(doc: dict, results) -> dict:
    loglikelihood, _is_greedy = results[0]
    return {"bpb": bits_per_byte(loglikelihood, doc["bpb_context"], doc["bpb_target"])}


def _with_pair(dataset, pair):
    return dataset.map(lambda doc: dict(zip(("bpb_context", "bpb_target"), pair(doc))))


def mmlu_docs(dataset):
    # lm-eval's MMLU cloze ("continuation") prompt, the gold choice as the answer
    return _with_pair(dataset, lambda d: (f"Question: {d['question'].strip()}\nAnswer:",
                                          " " + d["choices"][int(d["answer"])]))


def gpqa_docs(dataset):
    return _with_pair(dataset, lambda d: (f"Question: {d['Question'].strip()}\nAnswer:",
                                          " " + d["Correct Answer"].strip()))


def triviaqa_docs(dataset):
    # lm-eval's official TriviaQA prompt; the canonical answer (`value`) as the gold text
    return _with_pair(dataset, lambda d: (f"Question: {d['question']}?\nAnswer:", " " + d["answer"]["value"]))


def minerva_math_docs(dataset):
    # Minerva's prompt (lm-eval's minerva_math doc_to_text), the full reference solution as the gold text
    return _with_pair(dataset, lambda d: ("Problem:\n" + d["problem"] + "\n\nSolution:", " " + d["solution"]))


def humaneval_docs(dataset):
    return _with_pair(dataset, lambda d: (d["prompt"], d["canonical_solution"]))
