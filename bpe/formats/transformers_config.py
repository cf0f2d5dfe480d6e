"""What `transformers.AutoTokenizer.from_pretrained(dir)` reads beside tokenizer.json:
`tokenizer_config.json` (the class to build, which special token plays which role, the longest
input) and `special_tokens_map.json`."""

from __future__ import annotations

import json
from pathlib import Path

from bpe.formats.files import read_json
from bpe.formats.record import TokenizerRecord
from bpe.formats.roles import ROLES

CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"


def special_tokens_map(special_tokens: dict[str, int], roles: dict[str, str]) -> dict:
    """special_tokens_map.json: `{"eos_token": "<|endoftext|>", ...}` for each role given, and the
    special tokens without a role as `additional_special_tokens` (so transformers counts them as
    special: `decode(ids, skip_special_tokens=True)` drops them)."""
    mapping: dict = {f"{role}_token": roles[role] for role in ROLES if role in roles}
    others = [token for token in special_tokens if token not in roles.values()]
    if others:
        mapping["additional_special_tokens"] = others
    return mapping


# How tokenizer.json's added_tokens describe a special token: matched as its exact text.
ADDED_TOKEN_FLAGS = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}


def transformers_config(
    special_tokens: dict[str, int], roles: dict[str, str], model_max_length: int | None = None
) -> dict:
    """tokenizer_config.json: a `PreTrainedTokenizerFast` over tokenizer.json, with the special
    tokens' roles. `clean_up_tokenization_spaces` is off so that decoding gives the text back
    exactly (transformers would otherwise drop the space in " ." and "n 't"); the model inputs are
    the ids and the attention mask (no token type ids: a byte-level BPE has one segment).
    `model_max_length`, when set, is what `truncation=True` cuts to."""
    length = {} if model_max_length is None else {"model_max_length": model_max_length}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        **length,
        **special_tokens_map(special_tokens, roles),
        "added_tokens_decoder": {
            str(token_id): {**ADDED_TOKEN_FLAGS, "content": text} for text, token_id in special_tokens.items()
        },
    }


def write(directory: Path, record: TokenizerRecord) -> None:
    """Write tokenizer_config.json and special_tokens_map.json beside tokenizer.json."""
    roles = record.special_token_roles or {}
    documents = {
        CONFIG_FILE: transformers_config(record.special_tokens, roles, record.model_max_length),
        SPECIAL_MAP_FILE: special_tokens_map(record.special_tokens, roles),
    }
    for name, document in documents.items():
        (directory / name).write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def read_roles(path: Path, special_tokens: dict[str, int]) -> dict[str, str]:
    """The roles a tokenizer_config.json made elsewhere gives (`"eos_token": "</s>"`, or an added
    token object with a `content`), keeping those whose token is one of `special_tokens`."""
    doc = read_json(path)
    roles: dict[str, str] = {}
    if not isinstance(doc, dict):
        return roles
    for role in ROLES:
        value = doc.get(f"{role}_token")
        token = value.get("content") if isinstance(value, dict) else value
        if isinstance(token, str) and token in special_tokens:
            roles[role] = token
    return roles


def read_max_length(path: Path) -> int | None:
    """The `model_max_length` a tokenizer_config.json gives, or None where it gives none or
    transformers' stand-in for none (int(1e30))."""
    doc = read_json(path)
    value = doc.get("model_max_length") if isinstance(doc, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**29:
        return value
    return None
