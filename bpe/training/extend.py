"""Training that starts where a tokenizer ends: the base tokenizer, its checks, sizes and ids.

`train(..., base=tok)` replays the base's merges on the new corpus's words, in the base's order
(`bpe.engine.replay`), then learns more. Every base token keeps its id, special tokens included;
the new tokens take the ids after the base's largest. GPT-2 (ids 0-50256, `<|endoftext|>` at
50256) extended by 100 merges gives them ids 50257-50356, so a model that uses GPT-2's ids reads
its old ids as before and only the new ids are new to it.

>>> base = Tokenizer([(104, 105)], "gpt2", ["<|endoftext|>"])   # 256 bytes, "hi" = 256, eot = 257
>>> tok = extended(Base(base, "a Tokenizer"), [(256, 105)])      # "hii" = 258
>>> tok.encode("hii"), tok.eot_token, tok.decode([258])
([258], 257, 'hii')
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bpe.errors import ExportError, SettingsError
from bpe.manifest import BaseRecord
from bpe.tokenizer import Tokenizer
from bpe.training.settings import Settings

if TYPE_CHECKING:
    from bpe.engine.replay import BaseMerges


@dataclass
class Base:
    """A tokenizer to train from, and where it came from (a path, a URL or "a Tokenizer")."""

    tokenizer: Tokenizer
    source: str

    @property
    def named(self) -> str:
        """The base as messages name it: "the base tokenizer tok/", or without a path."""
        return "the base tokenizer" if self.source == "a Tokenizer" else f"the base tokenizer {self.source}"

    @property
    def merges(self) -> BaseMerges:
        from bpe.engine.replay import BaseMerges

        return BaseMerges(np.array(self.tokenizer.merges, dtype=np.int64).reshape(-1, 2))

    @property
    def digest(self) -> str:
        """SHA-256 of what decides the extended tokenizer: the merges, ids, special tokens and pattern."""
        tok = self.tokenizer
        described = {
            "merges": tok.merges,
            "ids": tok._vocabulary.to_ids.tolist(),
            "special_tokens": tok.special_tokens,
            "regex": tok.pretokenizer.regex,
        }
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def record(self) -> BaseRecord:
        """The manifest's `base` section."""
        tok = self.tokenizer
        return BaseRecord(
            source=self.source,
            sha256=self.digest,
            vocab_size=tok.vocab_size,
            merges=len(tok.merges),
            max_token_id=tok.max_token_value,
        )


def load_base(base: Base | Tokenizer | str | Path, pattern: str | None = None) -> Base:
    """The base of `train(..., base=...)`: a Tokenizer, a Base already loaded, or a path or URL of
    anything `Tokenizer.load` reads, recorded as given. `pattern` is the run's, if given: what the
    files record none of (tiktoken ranks; GPT-2's vocab.json + merges.txt) is read with it, as
    `Tokenizer.load(path, pattern)` reads them; a tokenizer.json keeps its own. Not a byte-level
    BPE, or merges that are not a valid BPE sequence: one line (ExportError naming the file, or
    SettingsError naming `base`); so is a URL that cannot be read (no credentials, no endpoint)."""
    if isinstance(base, Base):
        found = base
    elif isinstance(base, Tokenizer):
        found = Base(base, "a Tokenizer")
    elif isinstance(base, (str, Path)):
        found = Base(_read(base, pattern), str(base))
    else:
        raise SettingsError(
            lambda s: f"{s.base}: expected a Tokenizer, a path or a URL, got {type(base).__name__}", parameter="base"
        )
    first: dict[tuple[int, int], int] = {}
    for k, pair in enumerate(found.tokenizer.merges):
        if first.setdefault(pair, k) != k:
            raise SettingsError(
                lambda s, k=k, pair=pair: (
                    f"{s.base}: {found.source}: merge {k} repeats merge {first[pair]}, so it could never "
                    "apply; the merges are not a BPE sequence"
                ),
                parameter="base",
            )
    return found


def _read(source: str | Path, pattern: str | None) -> Tokenizer:
    """The tokenizer at `source`, read with the run's `pattern` where its files record none."""
    from bpe import storage
    from bpe.errors import BpeError
    from bpe.formats.spelling import each_merge_once
    from bpe.schema import check

    if pattern is not None:
        check("pattern", pattern)  # a bad one is named as such, not as the base's
    try:
        with each_merge_once():  # a repeated merge stops the reading there, not after the file's last line
            try:
                return Tokenizer.load(source, pattern)
            except SettingsError as exc:
                if pattern is None or exc.parameter != "pattern":
                    raise
                return Tokenizer.load(source)  # a tokenizer.json records its own: the run's replaces it after
    except FileNotFoundError as exc:
        missing = str(exc)  # `exc` is unbound after the clause, where the message may be composed again
        raise SettingsError(lambda s: f"{s.base}: {missing}", parameter="base") from None
    except ValueError as exc:  # merges that use a token before it exists
        raise ExportError(f"{source}: {exc}") from None
    except BpeError:
        raise
    except Exception as exc:  # an object store's own errors: no credentials, no bucket, no endpoint
        if not storage.is_remote(source):
            raise
        reason = (str(exc).splitlines() or [""])[0]
        kind = type(exc).__name__
        raise SettingsError(lambda s: f"{s.base}: cannot read {source} ({kind}: {reason})", parameter="base") from None


def special_tokens_with(base: Base, special_tokens: Sequence[str]) -> list[str]:
    """The extended tokenizer's special tokens: the base's, then those of `special_tokens` it lacks."""
    kept = list(base.tokenizer.special_tokens)
    return kept + [t for t in special_tokens if t not in base.tokenizer.special_tokens]


def base_settings(base: Base, vocab_size: int, special_tokens: Sequence[str], pattern: str | None) -> dict:
    """What training from `base` sets: its special tokens first, its pattern unless the run names
    one, its merges replayed first, and the bytes it has no id for; `vocab_size`, the final size,
    must hold the base and the new special tokens. The keyword arguments of `Settings`."""
    special_tokens = special_tokens_with(base, special_tokens)
    check_vocab_size(base, vocab_size, special_tokens)
    tok = base.tokenizer
    return {
        "special_tokens": tuple(special_tokens),
        "pattern": pattern or tok.pattern,
        "base_merges": len(tok.merges),
        "base_missing_bytes": len(tok.vocab) + len(tok.special_tokens) - tok.vocab_size,
    }


def check_vocab_size(base: Base, vocab_size: int, special_tokens: Sequence[str]) -> None:
    """`vocab_size` is the final size: at least the base's tokens and the new special tokens."""
    tok = base.tokenizer
    least = tok.vocab_size + len(special_tokens_with(base, special_tokens)) - len(tok.special_tokens)
    if vocab_size < least:
        raise SettingsError(
            lambda s: (
                f"{s.vocab_size} {vocab_size:,} is smaller than {base.named} "
                f"({least:,} tokens with the special tokens); give the final size, at least {least:,}"
            ),
            parameter="vocab_size",
        )


def extended(
    base: Base,
    new_merges: Sequence[tuple[int, int]] | np.ndarray,
    pattern: str | None = None,
    special_tokens: Sequence[str] = (),
    *,
    special_token_roles: Mapping[str, str] | None = None,
    model_max_length: int | None = None,
) -> Tokenizer:
    """The base with `new_merges` after its own (ids from `base.merges.first_new_id`). Base tokens
    keep their ids; new merges take the ids after the base's largest, then new special tokens.
    Pattern, roles and `model_max_length` are the base's unless given."""
    tok = base.tokenizer
    merges = list(tok.merges) + [(int(a), int(b)) for a, b in np.asarray(new_merges).reshape(-1, 2)]
    n_base = len(tok.vocab)
    next_id = tok.max_token_value + 1
    ids = tok._vocabulary.given_ids()  # a byte it lacks has no id
    for k in range(len(merges) - len(tok.merges)):
        ids[n_base + k] = next_id + k
    next_id += len(merges) - len(tok.merges)
    specials = dict(tok.special_tokens)
    for text in special_tokens_with(base, special_tokens)[len(specials) :]:
        specials[text] = next_id
        next_id += 1
    roles = dict(tok.special_token_roles) if special_token_roles is None else special_token_roles
    max_length = tok.model_max_length if model_max_length is None else model_max_length
    natural = (
        len(ids) == len(merges) + 256
        and all(ids[i] == i for i in ids)
        and list(specials.values()) == list(range(len(merges) + 256, len(merges) + 256 + len(specials)))
    )
    return Tokenizer(
        merges,
        pattern or tok.pattern,
        specials,
        special_token_roles=roles,
        model_max_length=max_length,
        ids=None if natural else ids,
    )


def trained_tokenizer(
    merges: np.ndarray,
    settings: Settings,
    base: Base | None = None,
    *,
    special_token_roles: Mapping[str, str] | None = None,
    model_max_length: int | None = None,
) -> Tokenizer:
    """The tokenizer a run's `merges` make with `settings`: from nothing, or after `base`'s."""
    if base is None:
        return Tokenizer(
            merges,
            settings.tokenizer_pattern,
            list(settings.special_tokens),
            special_token_roles=special_token_roles,
            model_max_length=model_max_length,
        )
    return extended(
        base,
        merges,
        settings.tokenizer_pattern,
        settings.special_tokens,
        special_token_roles=special_token_roles,
        model_max_length=model_max_length,
    )
