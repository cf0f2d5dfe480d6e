"""Hugging Face's `tokenizer.json` for a byte-level BPE: the split regex, the vocab and the merges
in GPT-2's spelling, the special tokens as added tokens; written by `write`, read from any tool by
`read` (a saved directory's copy is checked against its other files by `bpe.formats.saved`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

from bpe.errors import ExportError, NotApplied
from bpe.formats.files import check_ids, read_json
from bpe.formats.gpt2 import vocab_json
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import from_spelled, spelled
from bpe.formats.transformers_config import CONFIG_FILE, read_max_length, read_roles
from bpe.pretokenize import NAMED_PATTERNS, SUPERBPE_SPLIT, WHITESPACE_RUN, Pretokenizer, too_many_special_tokens

HF_FILE = "tokenizer.json"


def hf_split_regex(pattern_name: str, pattern_regex: str) -> tuple[str, str, bool]:
    """(regex, behavior, invert) of the Hugging Face Split pre-tokenizer for a pattern; a user's
    regex as it is, which Split cuts as we do (`bpe.pretokenize.split_isolated`)."""
    if pattern_name == "whitespace":
        # str.split(): drop runs of whitespace. Spelled out so every regex engine agrees.
        return WHITESPACE_RUN, "Removed", False
    if pattern_name == "superbpe":  # the paper's own Split, as its tokenizer.json holds it
        return SUPERBPE_SPLIT, "Isolated", False
    if pattern_name == "cl100k":
        # Oniguruma reads tiktoken's possessive `{1,3}+` as "one or more groups of 1-3 digits";
        # the plain interval means the same here, since nothing follows it in its alternative.
        return pattern_regex.replace(r"\p{N}{1,3}+", r"\p{N}{1,3}"), "Isolated", False
    return pattern_regex, "Isolated", False


def tokenizer_json(
    vocab: Sequence[bytes],
    merges: Sequence[tuple[int, int]],
    special_tokens: dict[str, int],
    pattern_name: str,
    pattern_regex: str,
    ids: Sequence[int] | None = None,
) -> dict:
    """The Hugging Face `tokenizer.json` document for a byte-level BPE tokenizer (token i's id is
    `ids[i]`, or i)."""
    split_regex, behavior, invert = hf_split_regex(pattern_name, pattern_regex)
    names = spelled(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": token_id,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for text, token_id in special_tokens.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": behavior, "invert": invert},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab_json(names, special_tokens, ids),
            "merges": [[names[a], names[b]] for a, b in merges],
        },
    }


def write(path: Path, record: TokenizerRecord) -> None:
    """Write the `tokenizer_json` document of `record` to `path`."""
    pretokenizer = Pretokenizer(record.pattern)
    document = tokenizer_json(
        record.vocab(), record.merges, record.special_tokens, pretokenizer.name, pretokenizer.regex, record.id_list()
    )
    path.write_text(json.dumps(document, ensure_ascii=False) + "\n", encoding="utf-8")


def read_document(path: Path) -> tuple[dict[str, int], list[tuple[str, str]], dict[str, int], str]:
    """(vocab as spelling -> id, merges as pairs of spellings, added tokens as content -> id, split
    pattern) of a Hugging Face byte-level BPE `tokenizer.json` made by any tool. A model that is not
    BPE, a normalizer, a pre-tokenizer that is not byte-level, BPE options that change the result
    (dropout, word prefixes and suffixes) and added tokens that strip spaces raise ExportError
    naming the file and what is not supported. The post-processor (a BOS template, say) is not
    applied: ids are those of the text alone, as `encode(text, add_special_tokens=False)` gives;
    nor are truncation and padding, which a NotApplied warning names (`warn_not_applied`)."""
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise ExportError(f"{path}: not a Hugging Face tokenizer.json (no 'model' object)")
    model = doc["model"]
    if "type" not in model and "merges" not in model:  # untyped (an old file): only a BPE model has merges
        raise ExportError(f"{path}: model has no 'merges'")
    kind = model.get("type", "BPE")
    if kind != "BPE":
        raise ExportError(f"{path}: model type {kind!r} is not supported (only byte-level BPE)")
    if doc.get("normalizer") is not None:
        raise ExportError(
            f"{path}: {_named('normalizer', doc['normalizer'])} is not supported (byte-level BPE "
            "encodes the text as it is; a normalizer would change it first)"
        )
    pattern = hf_pattern(path, doc.get("pre_tokenizer"))
    warn_not_applied(path, doc)
    for option, neutral in (
        ("dropout", (None, 0, 0.0)),
        ("continuing_subword_prefix", (None, "")),
        ("end_of_word_suffix", (None, "")),
    ):
        if model.get(option) not in neutral:
            raise ExportError(f"{path}: BPE {option} {model[option]!r} is not supported")
    check_bpe_model(path, model)
    vocab = model["vocab"]
    for spelling, token_id in vocab.items():
        if type(token_id) is not int:
            raise ExportError(f"{path}: model.vocab: token {spelling!r} has id {token_id!r}, not an integer")
    merges = hf_merges(path, model["merges"])
    added: dict[str, int] = {}
    listed = doc.get("added_tokens") or []
    if isinstance(listed, list) and (problem := too_many_special_tokens(len(listed))) is not None:
        raise ExportError(f"{path}: added_tokens: {problem}")
    for k, token in enumerate(listed):
        if not (isinstance(token, dict) and isinstance(token.get("content"), str) and type(token.get("id")) is int):
            raise ExportError(f"{path}: added_tokens[{k}] is not a token with a content and an id")
        if not token["content"]:
            raise ExportError(
                f"{path}: added_tokens[{k}] (id {token['id']}) is an empty token, which no text can hold "
                "(Hugging Face ignores it; remove it from the file)"
            )
        stripping = [flag for flag in ("lstrip", "rstrip", "single_word") if token.get(flag)]
        if stripping:
            raise ExportError(
                f"{path}: added token {token['content']!r} has {stripping[0]}=true, which is not "
                "supported (special tokens match their exact text)"
            )
        added[token["content"]] = token["id"]
    tokens = len(vocab.keys() | added.keys())
    check_ids(f"{path}: model.vocab", vocab, tokens)
    check_ids(f"{path}: added_tokens", added, tokens)
    return vocab, merges, added, pattern


def warn_not_applied(path: Path, doc: dict) -> None:
    """Say (a NotApplied warning naming the file) that the document's truncation and padding, where
    set, are not applied: `encode` gives the ids of the whole text, unpadded, as a tiktoken encoder
    does and as Hugging Face does after `no_truncation()` and `no_padding()`."""
    settings = []
    truncation, padding = doc.get("truncation"), doc.get("padding")
    if truncation is not None:
        length = truncation.get("max_length") if isinstance(truncation, dict) else None
        settings.append(f"truncation (to {length} tokens)" if type(length) is int else "truncation")
    if padding is not None:
        strategy = padding.get("strategy") if isinstance(padding, dict) else None
        fixed = strategy.get("Fixed") if isinstance(strategy, dict) else None
        settings.append(f"padding (to {fixed} tokens)" if type(fixed) is int else "padding")
    if settings:
        warnings.warn(
            f"{path}: its {' and '.join(settings)} {'is' if len(settings) == 1 else 'are'} not applied: "
            "encode gives the ids of the whole text, unpadded (as Hugging Face's encode does after "
            "no_truncation() and no_padding())",
            NotApplied,
            stacklevel=2,
        )


def hf_merges(path: Path, listed: list) -> list[tuple[str, str]]:
    """A tokenizer.json's `model.merges` as pairs of spellings: "a b" strings or ["a", "b"] lists."""
    merges = []
    for k, merge in enumerate(listed):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise ExportError(f"{path}: model.merges[{k}]: expected two tokens, got {merge!r}")
        merges.append((parts[0], parts[1]))
    return merges


def check_bpe_model(path: Path, model: dict) -> None:
    """A tokenizer.json's BPE model must hold a `vocab` object and a `merges` list: ExportError
    naming the file and the part missing otherwise."""
    for key, kind, called in (("vocab", dict, "an object"), ("merges", list, "a list")):
        if key not in model:
            raise ExportError(f"{path}: model has no {key!r}")
        if not isinstance(model[key], kind):
            raise ExportError(f"{path}: model {key!r} is not {called}")


def _named(where: str, part: object) -> str:
    """A component of tokenizer.json by its type, for an error: "pre_tokenizer Metaspace"."""
    kind = part.get("type") if isinstance(part, dict) else None
    return f"{where} {kind}" if kind else f"{where} {json.dumps(part)[:60]}"


def hf_pattern(path: Path, pre_tokenizer: object) -> str:
    """Our split pattern (a name or a regex) for a byte-level pre-tokenizer of tokenizer.json:
    `ByteLevel` with its own (GPT-2) regex, or `Split` by a regex (pieces isolated, or whitespace
    removed as `save` writes the `whitespace` pattern) followed by `ByteLevel` without a regex.
    Anything else raises ExportError naming the file and the part that is not supported."""

    def unsupported(what: str) -> ExportError:
        return ExportError(
            f"{path}: {what} is not supported (only byte-level BPE: a ByteLevel pre-tokenizer, "
            "alone or after one regex Split)"
        )

    steps = pre_tokenizer.get("pretokenizers") if isinstance(pre_tokenizer, dict) else None
    if not (isinstance(pre_tokenizer, dict) and pre_tokenizer.get("type") == "Sequence"):
        steps = [pre_tokenizer]
    if not isinstance(steps, list) or not steps or pre_tokenizer is None:
        raise unsupported("a tokenizer without a ByteLevel pre-tokenizer")
    *splits, last = steps
    if not (isinstance(last, dict) and last.get("type") == "ByteLevel"):
        raise unsupported(_named("pre_tokenizer", last))
    if last.get("add_prefix_space"):
        raise unsupported("ByteLevel with add_prefix_space=true (a space put before the text)")
    if not splits:
        if last.get("use_regex", True) is False:
            raise unsupported("ByteLevel without a regex and without a Split before it (no split at all)")
        return "gpt2"  # ByteLevel's own regex is GPT-2's
    if len(splits) > 1:
        raise unsupported(f"a sequence of {len(steps)} pre-tokenizers")
    split = splits[0]
    if not (isinstance(split, dict) and split.get("type") == "Split"):
        raise unsupported(_named("pre_tokenizer", split))
    if last.get("use_regex", True) is not False:
        raise unsupported("a Split followed by ByteLevel with its own regex (two splits)")
    regex_text = split.get("pattern", {}).get("Regex") if isinstance(split.get("pattern"), dict) else None
    if not isinstance(regex_text, str):
        raise unsupported(f"Split by {json.dumps(split.get('pattern'))[:60]} (only a Regex)")
    behavior, invert = split.get("behavior"), split.get("invert", False)
    for name, known in NAMED_PATTERNS.items():
        if hf_split_regex(name, known) == (regex_text, behavior, invert):
            return name
    if behavior != "Isolated" or invert:
        raise unsupported(f"Split with behavior {behavior!r}, invert {invert!r} (only 'Isolated')")
    return regex_text  # our pieces of a regex are this Split's (bpe.pretokenize.split_isolated)


def read(path: Path) -> TokenizerRecord:
    """A Hugging Face byte-level BPE tokenizer.json made by any tool, with its own ids; the roles
    come from a tokenizer_config.json beside it, if there is one."""
    vocab, merges, added, pattern = read_document(path)
    for text, token_id in added.items():
        if text in vocab and vocab[text] != token_id:
            raise ExportError(f"{path}: added token {text!r} has id {token_id}, model.vocab gives it {vocab[text]}")
    ordinary = {spelling: token_id for spelling, token_id in vocab.items() if spelling not in added}
    record = from_spelled(
        ordinary,
        merges,
        lambda k: f"{path}: model.merges[{k}]",
        added,
        pattern,
        f"{path}: model.vocab",
        orphans_are_special=False,
    )
    config = path.parent / CONFIG_FILE
    if config.exists():
        record.special_token_roles = read_roles(config, record.special_tokens)
        record.model_max_length = read_max_length(config)
    return record
