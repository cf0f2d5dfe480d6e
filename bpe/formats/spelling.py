"""GPT-2's byte spelling, shared by vocab.json, merges.txt and tokenizer.json: every byte is a
printable character (`bytes_to_unicode`), so b" the" is spelled "Ġthe". Spelled merges become id
pairs here (`merge_ids`), and a spelled vocabulary with its merges becomes a record (`from_spelled`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

from bpe.errors import ExportError
from bpe.formats.record import TokenizerRecord
from bpe.pretokenize import Pretokenizer, too_many_special_tokens


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the others map to U+0100 on."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


@lru_cache(maxsize=1)
def _latin1_to_spelling() -> list[str]:
    """`bytes_to_unicode` indexed by the Latin-1 character of each byte, for `str.translate`."""
    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def spell(token: bytes) -> str:
    """b' the' -> 'Ġthe'."""
    return token.decode("latin-1").translate(_latin1_to_spelling())


def spelled(vocab: Iterable[bytes]) -> list[str]:
    """Every token's spelling, in order: writers spell a vocabulary once, then index it."""
    table = _latin1_to_spelling()
    return [token.decode("latin-1").translate(table) for token in vocab]


def unspell(text: str) -> bytes:
    """'Ġthe' -> b' the'."""
    table = unicode_to_bytes()
    try:
        return bytes(table[c] for c in text)
    except KeyError as exc:
        raise ExportError(f"{text!r} is not spelled with GPT-2's byte characters ({exc})") from None


# Bytes that no valid UTF-8 text holds: C0 and C1 (they could only start overlong forms) and F5-FF
# (past U+10FFFF). A vocabulary trained without every byte in its alphabet (Hugging Face's
# BpeTrainer without `initial_alphabet`) lacks them, since its training text did. Encoding never
# meets them, so a tokenizer may lack them: they keep an internal token and have no id.
NEVER_IN_TEXT = frozenset([0xC0, 0xC1, *range(0xF5, 0x100)])


def unspelled(
    merges: Iterable[tuple[str, str]], where: Callable[[int], str]
) -> Iterator[tuple[bytes, bytes, str, str]]:
    """(left bytes, right bytes, left spelling, right spelling) of each spelled merge, as they come;
    a spelling that is not GPT-2's raises ExportError naming `where(k)`, the place of merge k."""
    for k, (a, b) in enumerate(merges):
        try:
            left, right = unspell(a), unspell(b)
        except ExportError as exc:
            raise ExportError(f"{where(k)}: {exc}") from None
        yield left, right, a, b


def merge_ids(
    merges: Iterable[tuple[str, str]], where: Callable[[int], str], *, unique: bool = True
) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) that spelled merges make, byte tokens first. Each
    merge must join tokens that exist before it; `unique` also refuses a merge making a token
    again (our files never do). Errors name `where(k)`, the place of merge k; merges are checked
    as they come, so the first bad one stops the reading."""
    vocab = [bytes([b]) for b in range(256)]
    ids = {token: token_id for token_id, token in enumerate(vocab)}
    pairs = []
    for k, (left, right, a, b) in enumerate(unspelled(merges, where)):
        for token, spelling in ((left, a), (right, b)):
            if token not in ids:
                raise ExportError(f"{where(k)}: token {spelling!r} is not made by an earlier merge")
        merged = left + right
        if unique and merged in ids:
            raise ExportError(f"{where(k)}: makes {spell(merged)!r} again (it is already token {ids[merged]})")
        pairs.append((ids[left], ids[right]))
        ids.setdefault(merged, len(vocab))
        vocab.append(merged)
    return vocab, pairs


def absent_bytes(file_id_of_bytes: Mapping[bytes, int], source: str) -> frozenset[int]:
    """The bytes a vocabulary lacks, which must be bytes valid UTF-8 never holds (`NEVER_IN_TEXT`).
    Lacking any other is an ExportError naming `source`: Hugging Face drops such a byte from the
    text without a word (no byte fallback, no unknown token), and this does not lose text."""
    missing = [b for b in range(256) if bytes([b]) not in file_id_of_bytes]
    lost = [b for b in missing if b not in NEVER_IN_TEXT]
    if lost:
        more = f" and {len(lost) - 1} other byte(s) text can hold" if len(lost) > 1 else ""
        raise ExportError(
            f"{source}: lacks the byte token {spell(bytes([lost[0]]))!r} (byte 0x{lost[0]:02X}){more}, so text "
            "holding it could not be encoded (Hugging Face drops it silently); a byte-level BPE needs every byte "
            "UTF-8 text can hold (train it with initial_alphabet=ByteLevel.alphabet())"
        )
    return frozenset(missing)


def special_text(token: bytes, pretokenizer: Pretokenizer) -> str | None:
    """The text of a vocabulary entry that no merge makes, if it can be a special token: text that
    the split pattern does not keep whole (`<|endoftext|>` is three pieces of GPT-2's pattern), so no
    text could make it as an ordinary token. None for anything else (a word such as `Ġrenewable`):
    an ordinary token whose merge is missing."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if pretokenizer.split_ordinary(text) != [text] else None


# Whether the merges read must each be new. A file may repeat a merge (Hugging Face then applies
# the pair at its later place, as `Tokenizer` does); a base to train from may not (`bpe.training.extend`
# replays each merge once), and its reading stops at the repeat rather than at the end of the file.
_EACH_MERGE_ONCE: ContextVar[bool] = ContextVar("each_merge_once", default=False)


@contextmanager
def each_merge_once() -> Iterator[None]:
    """Tokenizer files read in here refuse a merge that repeats an earlier one, at the repeat."""
    reset = _EACH_MERGE_ONCE.set(True)
    try:
        yield
    finally:
        _EACH_MERGE_ONCE.reset(reset)


def from_spelled(
    vocab: dict[str, int],
    merges: Iterable[tuple[str, str]],
    where: Callable[[int], str],
    special_tokens: dict[str, int],
    pattern: str,
    source: str,
    *,
    orphans_are_special: bool,
    lacks: str = "the vocab",
) -> TokenizerRecord:
    """A tokenizer from a vocabulary in GPT-2's spelling (spelling -> the file's id) and spelled
    merges, keeping the file's ids. Tokens no merge makes (other than the bytes) are an error, or
    with `orphans_are_special` special tokens when the split pattern cuts their text (GPT-2's
    vocab.json lists <|endoftext|> so); a word no merge makes is still an error (a merges.txt cut
    short). Bytes valid UTF-8 never holds may be missing (`absent_bytes`): they have no id. Merges
    are checked as they come (in `each_merge_once`, a repeated merge too). Errors name `source`
    (the vocabulary) or `where(k)` (merge k)."""
    file_id_of_bytes: dict[bytes, int] = {}
    specials = dict(special_tokens)
    for spelling, file_id in vocab.items():
        if not spelling:
            raise ExportError(f"{source}: holds an empty token (id {file_id}), which no text can make")
        try:
            file_id_of_bytes[unspell(spelling)] = file_id
        except ExportError:
            if not orphans_are_special:
                raise ExportError(
                    f"{source}: token {spelling!r} is not spelled with GPT-2's byte characters, so "
                    "this is not a byte-level BPE vocabulary"
                ) from None
            specials[spelling] = file_id
    absent = absent_bytes(file_id_of_bytes, source)
    ours = {b: file_id_of_bytes[bytes([b])] for b in range(256) if b not in absent}
    vocab_bytes = [bytes([b]) for b in range(256)]
    internal_of = {token: b for b, token in enumerate(vocab_bytes) if b not in absent}
    pairs: list[tuple[int, int]] = []
    first: dict[tuple[int, int], int] | None = {} if _EACH_MERGE_ONCE.get() else None
    for k, (left, right, a, b) in enumerate(unspelled(merges, where)):
        for token, spelling in ((left, a), (right, b)):
            if token not in internal_of:
                what = f"a byte that {lacks} lacks" if len(token) == 1 else "not made by an earlier merge"
                raise ExportError(f"{where(k)}: token {spelling!r} is {what}")
        merged = left + right
        if merged not in file_id_of_bytes:
            raise ExportError(f"{where(k)}: makes {spell(merged)!r}, which {lacks} lacks")
        pair = (internal_of[left], internal_of[right])
        if first is not None and first.setdefault(pair, k) != k:
            raise ExportError(
                f"{where(k)}: merge {k} ({a} {b}) repeats merge {first[pair]}, so it could never apply; the "
                "merges are not a BPE sequence"
            )
        pairs.append(pair)
        ours[len(vocab_bytes)] = file_id_of_bytes[merged]
        internal_of.setdefault(merged, len(vocab_bytes))
        vocab_bytes.append(merged)
    pretokenizer = Pretokenizer(pattern) if orphans_are_special else None
    for token, file_id in file_id_of_bytes.items():
        if token in internal_of:
            continue
        text = None if pretokenizer is None else special_text(token, pretokenizer)
        if text is None:
            why = ", which a byte-level BPE cannot produce"
            if pretokenizer is not None:
                why = (
                    f"; nor is it a special token, since the split pattern keeps it whole ({lacks} and "
                    "its merges do not belong together, or the merges were cut short)"
                )
            raise ExportError(
                f"{source}: token {spell(token)!r} (id {file_id}) is made by no merge and is not a byte{why}"
            )
        specials[text] = file_id
    if (problem := too_many_special_tokens(len(specials))) is not None:
        raise ExportError(f"{source}: {problem}")
    ids_of_tokens = [file_id for token, file_id in file_id_of_bytes.items() if token in internal_of]
    ids_of_tokens += list(specials.values())
    if len(set(ids_of_tokens)) != len(ids_of_tokens):
        raise ExportError(f"{source}: two different tokens have the same id")
    specials = dict(sorted(specials.items(), key=lambda item: item[1]))
    n = len(vocab_bytes)
    natural = (
        not absent
        and all(ours[i] == i for i in range(n))
        and list(specials.values()) == list(range(n, n + len(specials)))
    )
    return TokenizerRecord(pairs, pattern, specials, ids=None if natural else ours)
