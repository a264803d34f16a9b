"""Instruction data: chat-format records (`messages`) or prompt/completion records, rendered with a chat template,
with a loss mask on the assistant tokens only.

The template is the tokenizer's own when it has one, else `DEFAULT_CHAT_TEMPLATE` (plain "User:/Assistant:" turns in
the tokenizer's existing vocabulary, each assistant turn closed by EOS so generation stops). prepare_data.py saves the
template with the tokenizer, so train.py's final/ model renders prompts the way it was trained. Its assistant turns
are wrapped in `{% generation %}` markers, which TRL's `assistant_only_loss` and transformers'
`return_assistant_tokens_mask` use; the mask here is found without them (by rendering prefixes), so any template works.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..folders.json_limits import JSONDepthError, loads_limited

DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- 'Assistant: ' -}}{%- generation -%}{{- message['content'] + eos_token -}}{%- endgeneration -%}{{- '\n' -}}"
    "{%- else -%}"
    "{{- message['role'] | capitalize + ': ' + message['content'] + '\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}"
)
ROLES = ("system", "user", "assistant")


def to_messages(record: dict, where: str) -> list[dict]:
    """A record's conversation: `messages` as is, or `prompt` + `completion` as one user and one assistant turn."""
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{where}: `messages` must be a non-empty list of {{role, content}} objects")
        for i, message in enumerate(messages):
            if (not isinstance(message, dict) or message.get("role") not in ROLES
                    or not isinstance(message.get("content"), str)):
                raise ValueError(f"{where}: messages[{i}] must be {{\"role\": one of {ROLES}, \"content\": a string}}, "
                                 f"got {message!r:.120}")
        if not any(m["role"] == "assistant" for m in messages):
            raise ValueError(f"{where}: no assistant message: nothing to train on")
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    if isinstance(record.get("prompt"), str) and isinstance(record.get("completion"), str):
        return [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
    raise ValueError(f"{where}: a record needs `messages` (chat format) or string `prompt` and `completion` fields, "
                     f"got keys {sorted(record)}")


def read_conversations(paths) -> list:
    """Every record of the --chat files as a message list; a bad record stops with its file and line."""
    conversations = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise SystemExit(f"error: --chat {path}: not UTF-8 text ({error})") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"--chat {path}:{number}"
            try:
                record = loads_limited(line)
            except JSONDepthError as error:
                raise SystemExit(f"error: {where}: {error}; expected one conversation per line") from None
            except json.JSONDecodeError as error:
                raise SystemExit(f"error: {where}: not valid JSON ({error})") from None
            if not isinstance(record, dict):
                raise SystemExit(f"error: {where}: a record must be a JSON object")
            try:
                conversations.append(to_messages(record, where))
            except ValueError as error:
                raise SystemExit(f"error: {error}") from None
    return conversations


def read_chat_template(path: Path | None) -> str | None:
    """The --chat-template file's Jinja text (None: keep the tokenizer's, else the default)."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SystemExit(f"error: --chat-template {path}: not UTF-8 text ({error})") from None


def ensure_chat_template(tokenizer, template: str | None = None):
    """Set `template` (a Jinja string), else keep the tokenizer's own, else the default. Returns the tokenizer."""
    if template is not None:
        tokenizer.chat_template = template
    elif not tokenizer.chat_template:
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    return tokenizer


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns: each turn is what rendering up to
    it adds to the rendering of the conversation before it (with the generation prompt)."""
    text = render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, upto = render(tokenizer, messages[:i], add_generation_prompt=True), render(tokenizer, messages[: i + 1])
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError("the chat template does not render conversations prefix by prefix, so the assistant "
                             "tokens cannot be located; pass another --chat-template")
        spans.append((len(before), len(upto)))
    return text, spans


def tokenize_with_mask(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation, and 1 on tokens that overlap an assistant turn (0 elsewhere)."""
    text, spans = assistant_spans(tokenizer, messages)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(start < end_span and end > start_span for start_span, end_span in spans))
            for start, end in encoded["offset_mapping"]]
    return encoded["input_ids"], mask
