"""How the command spells what the library names by parameter: `--vocab-size` for `vocab_size`."""

from __future__ import annotations

# The library names settings by parameter; the command by flag.
FLAGS = {
    "vocab_size": "--vocab-size",
    "base": "--from",
    "pattern": "--pattern",
    "special_tokens": "--special-token",
    "bos_token": "--bos-token",
    "eos_token": "--eos-token",
    "pad_token": "--pad-token",
    "unk_token": "--unk-token",
    "min_frequency": "--min-frequency",
    "tie_break": "--tie-break",
    "max_token_length": "--max-token-length",
    "superwords": "--superwords",
    "transition": "--transition",
    "superword_pattern": "--superword-pattern",
    "max_words": "--max-words",
    "colon_space": "--colon-space",
    "model_max_length": "--model-max-length",
    "also_save": "--also-save",
    "text_column": "--text-column",
    "text_format": "--text-format",
    "limit": "--limit",
    "sample": "--sample",
    "seed": "--seed",
    "engine": "--engine",
    "threads": "--threads",
    "workers": "--workers",
    "scheduler": "--scheduler",
    "texts": "inputs",
    "prefect_port": "--prefect-port",
    "dask_port": "--dask-port",
    "dashboard_port": "--dashboard-port",
}


def in_flags(exc: Exception) -> str:
    """The error's message, with the parameter it names spelled as the command's flag.

    >>> from bpe.errors import SettingsError
    >>> in_flags(SettingsError("tie_break: expected one of bytes, ids, got 'max'", parameter="tie_break"))
    "--tie-break: expected one of bytes, ids, got 'max'"

    A word of a path or URL in the message is left alone:

    >>> in_flags(SettingsError("base: cannot read s3://base/tok/ (base.json, my-base)", parameter="base"))
    '--from: cannot read s3://base/tok/ (base.json, my-base)'
    """
    import re

    message = str(exc)
    parameter = getattr(exc, "parameter", None)
    if parameter in FLAGS:
        message = re.sub(rf"(?<![\w/.-]){parameter}(?![\w/-]|\.\w)", FLAGS[parameter], message)
    return message
