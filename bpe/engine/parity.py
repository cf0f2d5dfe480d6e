"""Parity-aware merges (Foroutan et al. 2025): each merge serves one language, the one whose
dev set is currently the longest in tokens (or, with ratio targets, the one whose training
compression divided by its ratio is the lowest), and that language's most frequent pair is
merged in every language. Counts are kept per language: one pair queue per language, fed by
the deltas of that language's word tables (slices on threads, buckets on Dask workers).

Languages are always held in the order of their codes (`arb` before `eng`); a tie between
languages goes to the first. A tie between pairs follows the run's `tie_break`.

The choice is Hugging Face's `ParityBpeTrainer` (tokenizers 0.23.3, `do_train`) exactly: the first
`global_merges` merges take the best pair of the counts summed over languages; a language with no
pair left that may be merged (none at all, none `max_token_length` allows, or none of
`min_frequency`) is exhausted and never served again, and the run ends when all are. The window
variant counts every choice in its window, even one whose language then proves exhausted. Where
Hugging Face's window loop would never end (the greatest language left is one it already passed
over: every language it may still serve is exhausted), the language of index 0 is served, as its
loop's first candidate; it is exhausted, so that choice only moves the window on.

Two languages, one merge each in turn (their dev sets tie, so the first goes first):

>>> from bpe.engine.count import WordCounts
>>> words = [WordCounts.from_dict({b"aabb": 10}), WordCounts.from_dict({b"ccdd": 10})]
>>> from bpe.engine.rules import MergeRules
>>> rules = MergeRules(tie_break="bytes", min_frequency=1, max_token_length=None, superwords=None)
>>> rule = ParityRule(variant="base", global_merges=0, window=100, alpha=2.0, ratio=None)
>>> result = learn_parity_merges(words, 4, rule, rules, dev=words)
>>> result.merges.tolist(), result.languages.tolist()
([[98, 98], [100, 100], [97, 256], [99, 257]], [0, 1, 0, 1])
"""

from __future__ import annotations

import time
from collections import namedtuple
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit
from numba.typed import List

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.copying import copy_into
from bpe.engine.count import WordCounts
from bpe.engine.errors import SettingsError
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.merge import MergeResult, ProgressCallback, drive, finish, first_id
from bpe.engine.pair_queue import PairQueue, queue_add_deltas, queue_add_token, queue_best_count, queue_next_round
from bpe.engine.replay import BaseMerges
from bpe.engine.rules import MergeRules
from bpe.engine.table_group import typed_list
from bpe.engine.word_table import WordTable, words_apply_merges, words_take_deltas

VARIANTS = ("base", "window")


@dataclass(frozen=True)
class ParityRule:
    """How a merge's language is chosen, as Hugging Face's `ParityBpeTrainer` names it.

    `variant` "base" serves the longest language; "window" skips a language chosen more than
    `alpha / languages` of the last `window` merges. `global_merges` ordinary merges (counts
    summed over languages) come first. `ratio` (one per language, in language order) replaces
    the dev set: the language with the lowest training compression divided by its ratio is served.
    """

    variant: str
    global_merges: int
    window: int
    alpha: float
    ratio: tuple[float, ...] | None


def check_rule(rule: ParityRule, n_languages: int, dev: Sequence[WordCounts] | None = None) -> None:
    """Refuse a rule that does not fit its languages. Its settings were checked where they were
    given (`bpe.schema`): what is left is the run's languages, which only the plan knows."""
    if n_languages < 1:
        raise SettingsError("parity-aware merges need at least one language", parameter="languages")
    if rule.ratio is not None and len(rule.ratio) != n_languages:
        raise ValueError(f"a parity rule for {n_languages} languages has {len(rule.ratio)} ratios")
    if dev is not None and len(dev) != n_languages:
        raise ValueError(f"a parity rule for {n_languages} languages has dev text for {len(dev)}")


def refuse_superwords() -> None:
    """Parity-aware merges and superwords do not go together: a superword run's second stage
    counts other words than its first, and the parity rule would need both per language."""
    raise SettingsError(lambda s: f"{s.on('superwords')}: a superword tokenizer cannot be trained with parity-aware "
                        f"merges ({s.on('parity')}); drop one of them", parameter="superwords")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The choice, compiled. A ParityState is what it reads and keeps:
# lengths: each language's dev tokens (training tokens without a dev set), as of the merges its
# words have seen; tokens: each language's training tokens, likewise; initial: the training tokens
# at the first choice (ratio targets); ratio: the targets (ones without); closed: 0 open,
# 1 exhausted, 2 exhausted with a pair below min_frequency left; recent: the window's choices, a
# ring, and recent_count each language's choices in it; dev_seen, seen: how many merges each
# language's dev words and training words have seen (see below); log: the merges made, rows
# (a, b, new id); meta: the counters below; threshold: [alpha / languages].
#
# Words are brought up to date only when the choice needs them. A merge only ever shortens words,
# so a language's length as of fewer merges is at least its length now (and its compression at
# most its compression now): a language that does not win on that bound cannot win on its length
# now, and the one that wins is brought up to date and compared again, until the winner is up to
# date. That gives the choice the exact lengths would give, while each word table takes its
# merges in batches (the merges of other languages mostly hold pairs its words lack), and its
# language's queue the net deltas of the batch. The local engine's training words are brought up
# to date the same way before their language's queue is asked for its best pair; a driver that
# adds every merge's deltas itself (the Dask engine) keeps them up to date.
ParityState = namedtuple(
    "ParityState",
    ["lengths", "tokens", "initial", "ratio", "closed", "recent", "recent_count", "dev_seen", "seen", "log", "meta",
     "threshold"],
)  # fmt: skip

# Entries of meta: merges made, the variant (0 base, 1 window), global merges, the window, the
# ring's next slot, choices in the ring, what drives the choice (below), exhausted languages,
# whether the first choice was made, whether a global queue follows the languages' queues, and
# why the run stopped early (0: it has not; 1: the global phase found no pair; 2: only pairs below
# min_frequency).
_MADE, _VARIANT, _GLOBAL, _WINDOW, _HEAD, _FILLED, _MODE, _N_CLOSED, _STARTED, _HAS_GLOBAL, _STOPPED = range(11)
_META_SIZE = _STOPPED + 1
_DEV, _TRAINING, _RATIO = 0, 1, 2  # modes: dev tokens, training tokens, training compression / ratio
GLOBAL = -1  # the language a global merge serves
_NONE = -2  # no merge left: every language exhausted
_INT64_MIN = np.iinfo(np.int64).min


@njit(cache=True)
def _add(queues, ps, language, keys, deltas):
    """Deltas of `language`'s training words: to its queue, to the global queue while a global
    merge is to come, and (after the first merge) to its tokens: a merge saves as many tokens as
    it takes pairs, so the deltas sum to minus the tokens saved."""
    if len(keys) == 0:
        return
    meta = ps.meta
    queues[language] = queue_add_deltas(queues[language], keys, deltas)
    if meta[_HAS_GLOBAL] != 0 and meta[_MADE] < meta[_GLOBAL]:
        g = len(ps.closed)
        queues[g] = queue_add_deltas(queues[g], keys, deltas)
    if meta[_MADE] > 0:
        change = deltas.sum()
        ps.tokens[language] += change
        if meta[_MODE] == _TRAINING:
            ps.lengths[language] += change


@njit(cache=True)
def _bring_dev(ps, dev, language):
    """Apply to `language`'s dev words the merges they have not seen; their tokens follow."""
    first, made = ps.dev_seen[language], ps.meta[_MADE]
    if first < made:
        state = words_apply_merges(dev[language], ps.log[first:made])
        keys, deltas = words_take_deltas(state)
        dev[language] = state
        ps.lengths[language] += deltas.sum()
        ps.dev_seen[language] = made


@njit(cache=True)
def _bring_words(ps, queues, tables, first_table, language):
    """Apply to `language`'s training words (tables first_table[language]:first_table[language + 1])
    the merges they have not seen, adding the deltas to its queue and its tokens."""
    first, made = ps.seen[language], ps.meta[_MADE]
    if first < made:
        merges = ps.log[first:made]
        for t in range(first_table[language], first_table[language + 1]):
            state = words_apply_merges(tables[t], merges)
            keys, deltas = words_take_deltas(state)
            tables[t] = state
            _add(queues, ps, language, keys, deltas)
        ps.seen[language] = made


@njit(cache=True)
def _behind(ps, tables, language):
    """Whether the length the choice reads for `language` is as of fewer merges than made."""
    made = ps.meta[_MADE]
    if ps.meta[_MODE] == _DEV:
        return ps.dev_seen[language] < made
    return len(tables) > 0 and ps.seen[language] < made


@njit(cache=True)
def _bring(ps, queues, dev, tables, first_table, language):
    if ps.meta[_MODE] == _DEV:
        _bring_dev(ps, dev, language)
    else:
        _bring_words(ps, queues, tables, first_table, language)


@njit(cache=True)
def _adjusted(ps, i):
    """Hugging Face's adjusted compression: (initial tokens / tokens now) / ratio, in float64."""
    return (ps.initial[i] / ps.tokens[i]) / ps.ratio[i] if ps.tokens[i] > 0 else np.nan


@njit(cache=True)
def _fill(ps, values):
    """The values the window variant ranks: lengths, or minus the adjusted compression; an exhausted
    language holds the lowest value (Hugging Face's i64::MIN, or minus infinity)."""
    for i in range(len(values)):
        if ps.meta[_MODE] == _RATIO:
            values[i] = -np.inf if ps.closed[i] else -_adjusted(ps, i)
        else:
            values[i] = _INT64_MIN if ps.closed[i] else ps.lengths[i]


@njit(cache=True)
def _window_choice(ps, queues, dev, tables, first_table, values, lowest):
    """Hugging Face's `select_language_window`: the greatest value (ties to the lower index) whose
    language made at most alpha / languages of the window's choices; else the next greatest; with
    every language over, the last tried. Exhausted languages hold `lowest`, so once only they are
    left the first candidate is 0; where that one was passed over already (Hugging Face's loop would
    never end), it is chosen. A candidate behind is brought up to date and the ranking made again."""
    n = len(values)
    masked = np.zeros(n, dtype=np.bool_)
    left = n
    window, threshold, recent_count = ps.meta[_WINDOW], ps.threshold[0], ps.recent_count
    _fill(ps, values)
    while True:
        best = np.int64(0)
        best_value = lowest
        for i in range(n):
            if not masked[i] and values[i] > best_value:
                best = i
                best_value = values[i]
        if masked[best]:
            return best
        if not ps.closed[best] and _behind(ps, tables, best):
            _bring(ps, queues, dev, tables, first_table, best)
            _fill(ps, values)
            continue
        if recent_count[best] / window <= threshold:
            return best
        masked[best] = True
        left -= 1
        if left == 0:
            return best


@njit(cache=True)
def _choose(ps, queues, dev, tables, first_table):
    """The language the next merge serves: GLOBAL in the global phase, _NONE when all are exhausted.
    A window choice joins the window here, whether or not its language proves exhausted."""
    meta, closed = ps.meta, ps.closed
    n = len(closed)
    if meta[_STOPPED] != 0 or meta[_N_CLOSED] >= n:
        return _NONE
    if meta[_MADE] < meta[_GLOBAL]:
        return GLOBAL
    language = np.int64(-1)
    if meta[_VARIANT] == 1:
        if meta[_MODE] == _RATIO:
            language = _window_choice(ps, queues, dev, tables, first_table, np.empty(n, np.float64), -np.inf)
        else:
            language = _window_choice(ps, queues, dev, tables, first_table, np.empty(n, np.int64), np.int64(_INT64_MIN))
        ring = ps.recent
        if meta[_FILLED] == meta[_WINDOW]:
            ps.recent_count[ring[meta[_HEAD]]] -= 1
        else:
            meta[_FILLED] += 1
        ring[meta[_HEAD]] = language
        ps.recent_count[language] += 1
        meta[_HEAD] = (meta[_HEAD] + 1) % meta[_WINDOW]
        return language
    while True:
        language = np.int64(-1)
        if meta[_MODE] == _RATIO:  # the lowest adjusted compression
            lowest = np.inf
            for i in range(n):
                if not closed[i] and _adjusted(ps, i) < lowest:
                    language = i
                    lowest = _adjusted(ps, i)
            for i in range(n):  # no language has a compression (no text): the first open one
                if language < 0 and not closed[i]:
                    language = i
        else:  # the longest
            longest = _INT64_MIN
            for i in range(n):
                if not closed[i] and ps.lengths[i] > longest:
                    language = i
                    longest = ps.lengths[i]
        if not _behind(ps, tables, language):
            return language
        _bring(ps, queues, dev, tables, first_table, language)


@njit(cache=True)
def parity_next_merge(queues, dev, ps, tables, first_table, min_frequency):
    """The next merge as a row (a, b, new id, count) and the language it serves (GLOBAL for a
    global merge; _NONE, with a row of zeros, when every language is exhausted); the new token is
    made in every queue. `queues`: a queue state per language, then the global queue's; `dev`: a
    word state per language (or none); `tables`: the training words' states, language by language
    (`first_table`), brought up to date here as the choice needs them; none when the driver adds
    every merge's deltas itself. The caller leaves room in `ps.log` for the merge."""
    meta = ps.meta
    n = len(ps.closed)
    if meta[_STARTED] == 0:
        meta[_STARTED] = 1
        copy_into(ps.initial, ps.tokens)
        for i in range(n):  # ratio targets serve by compression, which a language without text has none of
            if meta[_MODE] == _RATIO and ps.tokens[i] == 0:
                ps.closed[i] = 1
                meta[_N_CLOSED] += 1
    while True:
        language = _choose(ps, queues, dev, tables, first_table)
        if language == _NONE:
            return np.zeros(4, dtype=np.int64), _NONE
        if language == GLOBAL:
            q = n
            for i in range(n):  # the global queue holds every language's counts
                _bring_words(ps, queues, tables, first_table, i)
        else:
            q = language
            _bring_words(ps, queues, tables, first_table, language)
        state, batch = queue_next_round(queues[q], np.int64(1), min_frequency)
        if len(batch) == 0:
            state, best = queue_best_count(state)
            queues[q] = state
            if language == GLOBAL:  # as Hugging Face: no global pair, no merge at all
                meta[_STOPPED] = 2 if best > 0 else 1
            elif ps.closed[language] == 0:  # the window variant may choose an exhausted language again
                ps.closed[language] = 2 if best > 0 else 1
                meta[_N_CLOSED] += 1
            continue
        queues[q] = state
        a, b = batch[0, 0], batch[0, 1]
        global_next = meta[_HAS_GLOBAL] != 0 and meta[_MADE] + 1 < meta[_GLOBAL]
        for other in range(len(queues)):
            if other != q and (other < n or global_next):
                state, _ = queue_add_token(queues[other], a, b)
                queues[other] = state
        copy_into(ps.log[meta[_MADE], :], batch[0, :3])
        meta[_MADE] += 1
        if len(tables) == 0:
            ps.seen[:] = meta[_MADE]  # the driver brings the training words up to date itself
        return batch[0].copy(), language


@njit(cache=True)
def parity_add(queues, ps, language, keys, deltas):
    """Add pair-count deltas of `language`'s words (a driver's, after each merge)."""
    _add(queues, ps, language, keys, deltas)


@njit(cache=True)
def _bring_all(ps, queues, dev, tables, first_table):
    """Bring every language's dev and training words up to date."""
    for i in range(len(ps.closed)):
        if len(dev):
            _bring_dev(ps, dev, i)
        _bring_words(ps, queues, tables, first_table, i)


class ParityQueues:
    """The count side of parity-aware merges, for a driver that holds the words elsewhere (word
    slices on threads, buckets on Dask workers): a pair queue per language (and a global one while
    `rule.global_merges` are to come), the language choice, and the dev set's words, on which the
    merges are replayed. Languages are indices 0, 1, ... in the order of their codes.

    A driver: `add` each language's initial pair counts (each bucket's `take_deltas()`, to its
    language), and `set_training_tokens` for each language (needed with ratio targets or without a
    dev set); then repeat: `next_merge()` gives a merge row (a, b, new id, count) and
    the language served (GLOBAL = -1 for a global merge), or None when every language is exhausted;
    broadcast (a, b, new id) to every bucket of every language; `add` each bucket's deltas to its
    bucket's language. The deltas of every bucket must be in before the next `next_merge`.
    """

    @holds_interrupts
    def __init__(
        self,
        n_languages: int,
        rule: ParityRule,
        rules: MergeRules,
        *,
        dev: Sequence[WordCounts] | None = None,
        base: BaseMerges | None = None,
    ) -> None:
        """`dev`: the dev set's words, one `WordCounts` per language (ignored with ratio targets:
        they replace it, as in Hugging Face's trainer); None: choose by training tokens."""
        check_rule(rule, n_languages, dev)
        self.rule = rule
        self.n_languages = n_languages
        has_global = rule.global_merges > 0
        self.rules = rules
        queues = [PairQueue(rules) for _ in range(n_languages + has_global)]
        if base is not None:
            for queue in queues:
                queue.add_tokens(base.merges)
        self._queues = typed_list([queue._state for queue in queues], queues[0]._state)
        mode = _RATIO if rule.ratio is not None else _DEV if dev is not None else _TRAINING
        dev_tables = [WordTable(words, base) for words in dev] if mode == _DEV else []
        for table in dev_tables:
            table.take_deltas()  # the initial counts: the dev words' pairs are never chosen from
        self._like = WordTable(WordCounts.empty())._state
        self._dev = typed_list([table._state for table in dev_tables], self._like)
        self._tables = typed_list([], self._like)  # the training words are the driver's
        self._first_table = np.zeros(n_languages + 1, dtype=np.int64)
        meta = np.zeros(_META_SIZE, dtype=np.int64)
        meta[_VARIANT] = VARIANTS.index(rule.variant)
        meta[_GLOBAL] = rule.global_merges
        meta[_WINDOW] = rule.window
        meta[_MODE] = mode
        meta[_HAS_GLOBAL] = has_global
        lengths = np.array([table.token_count() for table in dev_tables] or [0] * n_languages, dtype=np.int64)
        ratio = np.array(rule.ratio if rule.ratio is not None else [1.0] * n_languages, dtype=np.float64)
        zeros = lambda: np.zeros(n_languages, dtype=np.int64)  # noqa: E731
        self._state = ParityState(
            lengths, zeros(), zeros(), ratio, zeros(), np.zeros(rule.window if rule.variant == "window" else 1,
            dtype=np.int64), zeros(), zeros(), zeros(), np.zeros((1024, 3), dtype=np.int64), meta,
            np.array([rule.alpha / n_languages], dtype=np.float64),
        )  # fmt: skip
        self._tokens_set = np.zeros(n_languages, dtype=bool)

    def hold_words(self, tables: List, first_table: np.ndarray) -> None:
        """Let this object bring the training words up to date as the choice needs them (the
        local engine): `tables`, a typed list of word states, language by language, language i's
        being tables[first_table[i]:first_table[i + 1]]; their initial deltas already added."""
        self._tables, self._first_table = tables, first_table

    @holds_interrupts
    def add(self, language: int, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Pair-count deltas (`WordTable.take_deltas()`) of words of `language`."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        deltas = np.ascontiguousarray(deltas, dtype=np.int64)
        parity_add(self._queues, self._state, int(language), keys, deltas)

    def set_training_tokens(self, language: int, tokens: int) -> None:
        """The training tokens of `language` as they stand (count x length over its words, all
        buckets): needed with ratio targets and without a dev set. The deltas added after each merge
        keep it current, so it is set once, before the first merge (or again at any time)."""
        self._state.tokens[language] = tokens
        if self._state.meta[_MODE] == _TRAINING:
            self._state.lengths[language] = tokens
        self._tokens_set[language] = True

    def _room(self, merges: int) -> None:
        """Make room in the merge log for that many more merges."""
        state = self._state
        needed = int(state.meta[_MADE]) + merges
        if needed > len(state.log):
            log = np.zeros((max(needed, 2 * len(state.log)), 3), dtype=np.int64)
            log[: len(state.log)] = state.log
            self._state = state._replace(log=log)

    @holds_interrupts
    def next_merge(self) -> tuple[np.ndarray, int] | None:
        """The next merge (a, b, new id, count) and the language it serves (GLOBAL: a global merge),
        made in every queue; None when no language has a merge left."""
        state = self._state
        if state.meta[_MODE] != _DEV and state.meta[_STARTED] == 0 and not self._tokens_set.all():
            missing = int(np.flatnonzero(~self._tokens_set)[0])
            raise ValueError(f"set_training_tokens was not called for language {missing}: the choice needs it")
        self._room(1)
        row, language = parity_next_merge(
            self._queues, self._dev, self._state, self._tables, self._first_table, max(int(self.rules.min_frequency), 1)
        )
        return None if language == _NONE else (row, int(language))

    def lend(self, loop, *args) -> tuple:
        """Run `loop(queues, dev, state, tables, first_table, *args)`, a compiled loop of merges
        over this object's kernel states (the local engine's), with room for `args[0]` merges."""
        self._room(int(args[0]))
        return loop(self._queues, self._dev, self._state, self._tables, self._first_table, *args)

    @property
    def merges_made(self) -> int:
        return int(self._state.meta[_MADE])

    @holds_interrupts
    def bring_up_to_date(self) -> None:
        """Apply every merge made to the dev words and the training words held here."""
        _bring_all(self._state, self._queues, self._dev, self._tables, self._first_table)

    def training_tokens(self) -> np.ndarray:
        """Each language's training tokens as they stand (as set, then moved by the deltas)."""
        self.bring_up_to_date()
        return self._state.tokens.copy()

    def dev_tokens(self) -> np.ndarray | None:
        """Each language's dev tokens as they stand (None without a dev set)."""
        self.bring_up_to_date()
        return self._state.lengths.copy() if self._state.meta[_MODE] == _DEV else None

    def stop_reason(self, done: int, wanted: int) -> str:
        """Why the merges stopped after `done` of `wanted`, as `merge.stop_reason` says it: a pair
        below min_frequency was left in an exhausted language ("min_frequency"), only pairs too long
        to merge were ("max_token_length"), or none ("no_pairs")."""
        if done >= wanted:
            return "vocab_size"
        if self._state.meta[_STOPPED] == 2 or (self._state.closed == 2).any():
            return "min_frequency"
        self.bring_up_to_date()
        if any((queue.counts[:, 1] > 0).any() for queue in self._queues):
            return "max_token_length"
        return "no_pairs"


def learn_parity_merges(
    counts: Sequence[WordCounts],
    n_merges: int,
    rule: ParityRule,
    rules: MergeRules,
    *,
    dev: Sequence[WordCounts] | None = None,
    threads: int = 1,
    base: BaseMerges | None = None,
    progress: ProgressCallback | None = None,
) -> MergeResult:
    """Up to `n_merges` parity-aware merges over the languages' word counts (`counts`, one per
    language in the order of their codes), in one process. `dev`: the dev set's words, one per
    language (None: ratio targets, or training tokens, choose). The result's `languages` holds the
    language each merge served (GLOBAL = -1 for a global merge). `threads`: each language's words
    are split into that many slices by their stable hash (the Dask engine's buckets), the same
    merges for any number. `rules` mean what they mean to `learn_merges` (parity makes no superwords)."""
    for words in counts:
        words.check_limit()
    queues = ParityQueues(len(counts), rule, rules, dev=dev, base=base)
    start = time.perf_counter()
    slices = max(int(threads), 1)
    states: list = []
    first_table = [0]
    for language, words in enumerate(counts):
        tokens = 0
        for part in words.split_by_hash(slices) if slices > 1 and len(words) >= slices else [words]:
            table = WordTable(part, base)
            queues.add(language, *table.take_deltas())
            tokens += table.token_count()
            states.append(table._state)
        first_table.append(len(states))
        queues.set_training_tokens(language, tokens)
    queues.hold_words(typed_list(states, states[0]), np.array(first_table, dtype=np.int64))
    served: list[np.ndarray] = []

    def run_rounds(budget: int) -> tuple[np.ndarray, int]:
        made = queues.lend(_parity_rounds, budget, max(int(rules.min_frequency), 1))
        served.append(made[:, 4])
        return made[:, :4], len(made)

    batches, done, rounds = drive(run_rounds, n_merges, progress)
    result = finish(batches, rounds, queues.stop_reason(done, n_merges), start, first_id(base))
    result.languages = np.concatenate(served) if served else np.zeros(0, dtype=np.int64)
    result.tokens_after = int(queues.training_tokens().sum())
    return result


@njit(cache=True)
def _parity_rounds(queues, dev, ps, tables, first_table, budget, min_frequency):
    """Up to `budget` parity-aware merges: rows (a, b, new id, count, language)."""
    made = np.empty((budget, 5), dtype=np.int64)
    n = 0
    while n < budget:
        row, language = parity_next_merge(queues, dev, ps, tables, first_table, min_frequency)
        if language == _NONE:
            break
        copy_into(made[n, :4], row)
        made[n, 4] = language
        n += 1
    return made[:n].copy()
