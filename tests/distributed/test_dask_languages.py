"""Multilingual runs on the Dask engine, on a real local cluster: each language counted apart, then
plain BPE on the languages summed (weighted by a mixture), or parity-aware merges over each
language's own word buckets. For 1-4 workers and both tie-breaks they give the local engine's
merges (`learn_merges` on the weighted sum, `learn_parity_merges` on the languages' counts), which
tests/languages/test_parity_training.py and tests/engine/test_merge.py hold to the reference trainers; a few runs
are held to the reference parity trainer here too."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.parity import ParityRule, learn_parity_merges
from bpe.errors import SettingsError
from bpe.inputs.discover import discover
from bpe.languages.mixture import Mix, check_weighted_limit, weighted, weighted_sum
from bpe.training.counting import count_words
from bpe.training.plan import LanguagePlan
from bpe.training.settings import Settings
from tests.conftest import merge_rules, parity_rule, scale, write_parquet
from tests.distributed.conftest import at_merge
from tests.reference import reference_parity_run

pytestmark = pytest.mark.services  # starts real services: the slow tier

distributed = pytest.importorskip("distributed")

CODES = ("ell", "eng", "hin", "rus")  # Greek, Latin, Devanagari and Cyrillic script
CONSONANTS = {
    "ell": "βγδζθκλμνξπρστφχψ",
    "eng": "bcdfghjklmnprstvwz",
    "hin": "कखगघचछजझटडतथदधनपबभमयरलवशसह",
    "rus": "бвгджзклмнпрстфхцчшщ",
}
VOWELS = {"ell": "αεηιουω", "eng": "aeiouy", "hin": ["", "ा", "ि", "ी", "ु", "े", "ो"], "rus": "аеиоуыэюя"}
SENTENCES = {"ell": 160, "eng": 420, "hin": 90, "rus": 230}  # unequal, as real multilingual data is
CONCEPTS = 90


def lexicon(code: str, rng: random.Random) -> list[str]:
    """A word of `code`'s script for each concept: 1-4 syllables of a consonant and a vowel."""
    return [
        "".join(rng.choice(CONSONANTS[code]) + rng.choice(VOWELS[code]) for _ in range(rng.randint(1, 4)))
        for _ in range(CONCEPTS)
    ]


def sentence(words: list[str], concepts: list[int], rng: random.Random) -> str:
    text = " ".join(words[c] for c in concepts)
    return text + rng.choice([".", ".", "!", "?", f", {rng.randint(1, 99)}."])


@pytest.fixture(scope="module")
def corpus() -> dict:
    """Four languages in four scripts: training sentences (Zipf-distributed concepts, unequal
    sizes) and a multi-parallel dev set (line i says the same concepts in every language)."""
    rng = random.Random(39)
    words = {code: lexicon(code, rng) for code in CODES}
    weights = [1 / (rank + 1) for rank in range(CONCEPTS)]

    def concepts() -> list[int]:
        return rng.choices(range(CONCEPTS), weights, k=rng.randint(3, 9))

    texts = [[sentence(words[code], concepts(), rng) for _ in range(SENTENCES[code])] for code in CODES]
    dev_lines = [concepts() for _ in range(30)]
    dev = [[sentence(words[code], line, random.Random(i)) for i, line in enumerate(dev_lines)] for code in CODES]
    return {"texts": texts, "dev": dev}


@pytest.fixture(scope="module")
def counts(corpus) -> list[WordCounts]:
    return [count_words(texts, "cl100k") for texts in corpus["texts"]]


@pytest.fixture(scope="module")
def dev(corpus) -> list[WordCounts]:
    return [count_words(texts, "cl100k") for texts in corpus["dev"]]


@pytest.fixture(scope="module")
def cluster(local_cluster):
    """The test process's LocalCluster (tests/conftest.py), which each test sizes (`scale`)."""
    return local_cluster


def on_dask(client, texts=None, shards=None, vocab_size=500, mix=None, parity=None, dev=None, **options):
    """A multilingual run of the Dask engine; returns the run and its plan (stats filled)."""
    from bpe.distributed.driver import train_on_dask

    plan = LanguagePlan(CODES, mix=Mix.parse(mix) if mix else None, parity=parity, dev=dev)
    settings = Settings(vocab_size=vocab_size, pattern="cl100k", **options)
    return train_on_dask(settings, shards, texts, client=client, languages=plan), plan


# Parity rules and how their runs are driven: by the dev set, by ratio targets, by training tokens.
PARITY = {
    "base": (parity_rule(), "dev", None),
    "window": (parity_rule(variant="window", window=6, alpha=1.0), "dev", None),
    "ratio": (parity_rule(ratio=(1.0, 1.4, 2.2, 1.2)), None, None),
    "global merges and a mixture": (parity_rule(global_merges=60), "dev", "eng=1,hin=3"),
    "training tokens, window": (parity_rule(variant="window", window=10, alpha=1.5), None, None),
}


@pytest.mark.parametrize("tie_break", ["bytes", "ids"])
def test_parity_on_dask_is_the_reference_parity_trainers(cluster, corpus, dev, tie_break):
    """Held to the reference parity trainer itself: global merges, then the window variant over
    the dev set, a mixture's multipliers weighing the global merges."""
    scale(*cluster, 2)
    rule = parity_rule(variant="window", global_merges=15, window=5, alpha=1.2)
    run, plan = on_dask(cluster[1], corpus["texts"], vocab_size=356, mix="eng=1,rus=2", parity=rule, dev=dev,
                        tie_break=tie_break)  # fmt: skip
    multipliers = [s.multiplier for s in plan.stats]
    languages = [{w: c * m for w, c in count_words(texts, "cl100k").to_dict().items()}
                 for texts, m in zip(corpus["texts"], multipliers, strict=True)]  # fmt: skip
    expected = reference_parity_run(languages, 100, variant="window", global_merges=15, window=5, alpha=1.2,
                                    dev=[d.to_dict() for d in dev], tie_break=tie_break)  # fmt: skip
    assert [tuple(pair) for pair in run.merges.merges.tolist()] == expected.merges
    assert run.merges.languages.tolist() == expected.languages


SCRIPTS = ["abc ", "αβγ ", "абв ", "कखग "]


@st.composite
def languages(draw) -> dict:
    """2-4 languages of short texts over a few letters of their scripts, a parity rule, and how the
    choice is driven (dev set, ratio targets, training tokens)."""
    n = draw(st.integers(2, 4))
    texts = [
        draw(
            st.lists(st.text(SCRIPTS[i], min_size=1, max_size=24), min_size=1, max_size=12).filter(
                lambda rows: any(row.strip() for row in rows)  # a language without a word is refused
            )
        )
        for i in range(n)
    ]
    by = draw(st.sampled_from(["dev", "ratio", "training"]))
    rule = ParityRule(
        variant=draw(st.sampled_from(["base", "window"])),
        global_merges=draw(st.sampled_from([0, 0, 2])),
        window=draw(st.integers(1, 5)),
        alpha=draw(st.sampled_from([0.5, 1.0, 2.0])),
        ratio=tuple(draw(st.sampled_from([0.7, 1.0, 2.5])) for _ in range(n)) if by == "ratio" else None,
    )
    dev = [draw(st.lists(st.text(SCRIPTS[i], min_size=1, max_size=24), min_size=1, max_size=4)) for i in range(n)]
    return {"texts": texts, "rule": rule, "dev": dev if by == "dev" else None}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(languages(), st.sampled_from(["bytes", "ids"]), st.sampled_from([None, 3]), st.sampled_from([1, 2]))
def test_parity_on_dask_equals_the_local_engine_on_any_languages(
    cluster, case, tie_break, max_token_length, min_frequency
):
    """Any small languages (words shared between them, empty texts, ties everywhere), any rule: the
    local engine's merges and languages served, on 2 workers."""
    from bpe.distributed.driver import train_on_dask

    scale(*cluster, 2)
    n = len(case["texts"])
    codes = tuple(sorted(f"l{i}" for i in range(n)))
    dev = [count_words(t, "whitespace") for t in case["dev"]] if case["dev"] is not None else None
    plan = LanguagePlan(codes, parity=case["rule"], dev=dev)
    options = dict(tie_break=tie_break, max_token_length=max_token_length, min_frequency=min_frequency)
    run = train_on_dask(Settings(vocab_size=300, pattern="whitespace", **options), None, case["texts"],
                        client=cluster[1], languages=plan)  # fmt: skip
    counts = [count_words(t, "whitespace") for t in case["texts"]]
    local = learn_parity_merges(counts, 300 - 256, case["rule"], merge_rules(**options), dev=dev)
    assert run.merges.merges.tolist() == local.merges.tolist()
    assert run.merges.languages.tolist() == local.languages.tolist()
    assert run.merges.stop_reason == local.stop_reason


def test_a_worker_lost_during_a_parity_run_is_rebuilt_and_merges_stay_exact(cluster, corpus, dev):
    """A worker killed a third of the way through a parity run: its holder (a hash bucket of every
    language) is rebuilt on a live worker from the buckets' checkpoints and the merge log, and the
    merges are the local engine's."""
    from bpe.distributed.driver import train_on_dask

    client = cluster[1]
    scale(cluster[0], client, 2)
    pids = list(client.run(os.getpid).values())
    progress = at_merge(1 / 3, lambda: os.kill(pids[0], signal.SIGKILL))
    log: list[str] = []
    rule = parity_rule(global_merges=20)
    plan = LanguagePlan(CODES, parity=rule, dev=dev)
    run = train_on_dask(Settings(vocab_size=500, pattern="cl100k"), None, corpus["texts"], client=client,
                        progress=progress, log=log.append, call_timeout=20, checkpoint_seconds=0.05,
                        languages=plan)  # fmt: skip
    local = learn_parity_merges(
        [count_words(t, "cl100k") for t in corpus["texts"]], 500 - 256, rule, merge_rules(), dev=dev
    )
    assert progress.fired and run.merges.merges.tolist() == local.merges.tolist()
    assert run.merges.languages.tolist() == local.languages.tolist()
    assert run.engine["recoveries"] >= 1
    rebuilt = [line for line in log if "lost; rebuilt" in line]
    assert rebuilt and all(line.startswith("word buckets ") for line in rebuilt)  # a hash bucket of every language


def test_a_mixture_past_what_int64_counts_is_refused_in_one_line_as_on_the_local_engine(cluster, corpus, counts):
    scale(*cluster, 2)
    mix = "ell=1,hin=100000000000000000"
    with pytest.raises(SettingsError) as on_workers:
        on_dask(cluster[1], corpus["texts"], mix=mix)
    multipliers = Mix.parse(mix).multipliers([sum(len(t.encode()) for t in texts) for texts in corpus["texts"]], CODES)
    with pytest.raises(SettingsError) as locally:
        check_weighted_limit(counts, multipliers)
    assert str(on_workers.value) == str(locally.value)
    assert str(on_workers.value).startswith("mix: the multipliers 1, 1, 100000000000000000, 1 make")
    assert on_workers.value.parameter == "mix"


def test_languages_summed_without_a_mixture_are_plain_bpe_on_all_the_text(cluster, corpus, counts):
    """No mixture, no parity: the languages' counts summed, as one text would give (words shared by
    two languages summed too)."""
    scale(*cluster, 2)
    shared = [texts + ["shared words in every language"] * 5 for texts in corpus["texts"]]
    run, plan = on_dask(cluster[1], shared)
    together = count_words([t for texts in shared for t in texts], "cl100k")
    assert run.merges.merges.tolist() == learn_merges(together, 500 - 256, merge_rules()).merges.tolist()
    assert run.unique_words == len(together) and [s.multiplier for s in plan.stats] == [1] * len(CODES)
    assert np.array_equal(run.merges.counts, learn_merges(together, 500 - 256, merge_rules()).counts)


def test_parity_serves_every_language_after_its_global_merges(cluster, corpus, dev):
    scale(*cluster, 2)
    rule, _, mix = PARITY["global merges and a mixture"]
    run, _ = on_dask(cluster[1], corpus["texts"], mix=mix, parity=rule, dev=dev)
    served = run.merges.languages.tolist()
    assert served[:60] == [-1] * 60 and set(served[60:]) == {0, 1, 2, 3}


def test_a_holder_of_several_buckets_answers_for_each_and_is_rebuilt_from_their_checkpoints(counts, tmp_path):
    """A holder of one hash bucket of each language (in this process, as in a worker): each round's
    reply holds each bucket's deltas, joined, as a table of that bucket alone gives them; rebuilt from the
    buckets' checkpoints and the rest of the merge log, it holds each bucket's words as replayed."""
    from bpe.distributed import channel
    from bpe.distributed.bucket_holder import BucketHolder
    from bpe.engine.table_group import split
    from bpe.engine.word_table import WordTable

    buckets = [c.split_by_hash(2)[1] for c in counts]
    rows = learn_merges(WordCounts.combine(counts), 120, merge_rules()).merges
    log = np.column_stack([rows, 256 + np.arange(len(rows))]).astype(np.int64)
    holder = BucketHolder(buckets, str(tmp_path), [1, 3, 5, 7], "secret")
    alone = [WordTable(b) for b in buckets]
    address = holder.address()
    sock = channel.connect(address["host"], address["port"], 10)
    try:
        channel.send(sock, b"HELO", np.frombuffer(b"secret", np.uint8))
        replies = [channel.receive(sock)[1]]
        expected = [[table.take_deltas() for table in alone]]
        for i, row in enumerate(log):
            channel.send(sock, b"MRGE", row)
            replies.append(channel.receive(sock)[1])
            expected.append([table.apply_and_take(log[i : i + 1]) for table in alone])
            if i == 59:
                channel.send(sock, b"CHKP")
                assert channel.receive(sock)[0] == b"DONE"
    finally:
        channel.send(sock, b"STOP")
        sock.close()
    for got, want in zip(replies, expected, strict=True):
        assert len(got) == 3 and len(got[2]) == len(buckets)  # every bucket's keys, deltas, and their ends
        for (keys, deltas), (k, d) in zip(split(*got), want, strict=True):  # the order of keys is free
            assert dict(zip(keys.tolist(), deltas.tolist())) == dict(zip(k.tolist(), d.tolist()))
    rebuilt = BucketHolder(None, str(tmp_path), [1, 3, 5, 7], "secret", log)
    rebuilt.server.close()
    assert rebuilt.restored_from.count("its checkpoint after 60 merges") == len(buckets)
    for part, table in zip(rebuilt.parts, alone, strict=True):
        assert [a.tolist() for a in part.table.to_words()] == [a.tolist() for a in table.to_words()]


def test_train_with_text_by_language_on_dask_gives_the_local_engines_tokenizer(cluster, corpus, tmp_path):
    """train(files={code: ...}, engine="dask"): the local engine's merges for a mixture, for parity
    against a dev set directory, and for parity extending a tokenizer, with the same record of
    every language in the manifest (the data fingerprint, which knows each file's language, too)."""
    from bpe import train

    scale(*cluster, 2)
    files = {code: str(write_parquet(tmp_path / code / "part.parquet", texts))
             for code, texts in zip(CODES, corpus["texts"], strict=True)}  # fmt: skip
    (tmp_path / "dev").mkdir()
    for code, lines in zip(CODES, corpus["dev"], strict=True):
        (tmp_path / "dev" / f"{code}.txt").write_text("\n".join(lines) + "\n")
    base = train(files=files, vocab_size=300)  # parity-aware merges extending a tokenizer (--from)
    dev = str(tmp_path / "dev")
    for options in (
        {"mix": "temperature=0.3"},
        {"parity_dev": dev, "global_merges": 20},
        {"parity_dev": dev, "base": base},
    ):
        local = train(files=files, vocab_size=400, **options)
        on_dask = train(files=files, vocab_size=400, engine="dask", client=cluster[1], **options)
        assert on_dask.merges == local.merges, options
        assert on_dask.manifest.languages == local.manifest.languages, options
        assert on_dask.manifest.data.fingerprint == local.manifest.data.fingerprint
        assert on_dask.manifest.counts.unique_words == local.manifest.counts.unique_words


def test_a_language_without_text_is_refused_in_one_line_as_on_the_local_engine(cluster, corpus):
    from bpe import train
    from bpe.errors import InputError

    scale(*cluster, 2)
    texts = {"eng": corpus["texts"][1], "hin": ["", ""]}
    errors = []
    for options in ({}, {"engine": "dask", "client": cluster[1]}):
        with pytest.raises(InputError) as refused:
            train(texts=texts, vocab_size=300, mix="temperature=0.3", **options)
        errors.append(str(refused.value))
    assert errors[0] == errors[1] and errors[0].startswith("hin: no text to train on")


def parquet_by_language(corpus: dict, root: Path) -> list[list]:
    """Each language's texts as two Parquet files, one of several row groups: a list of shards per language."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = []
    for code, texts in zip(CODES, corpus["texts"], strict=True):
        path = write_parquet(root / code / "part-0.parquet", texts[::2])
        pq.write_table(pa.table({"text": texts[::2]}), path, row_group_size=40)
        write_parquet(root / code / "part-1.parquet", texts[1::2])
        shards.append(discover([str(root / code)]))
    return shards


MIXES = [None, "temperature=0.3", "eng=1,hin=4,rus=2.5"]


@pytest.mark.parametrize("workers", [2, 3, 4, 1])  # from the 2 the tests before use: one worker fewer to start
def test_mixtures_and_parity_on_any_number_of_workers_give_the_local_engines_merges(
    cluster, corpus, counts, dev, tmp_path, workers
):
    """Every parity rule and mixture, each on two worker counts with both tie-breaks: parity runs
    (every language in buckets of its own) make the local engine's merges, counts, languages served,
    stop reason and tokens; mixtures (each language's Parquet files counted apart, as tasks) the
    local engine's merges on the languages' counts, each multiplied by its multiplier, summed."""
    scale(*cluster, workers)
    for i, (name, (rule, by, mix)) in enumerate(PARITY.items()):
        if i % 2 != workers % 2:
            continue
        tie_break = ("bytes", "ids")[(i + workers // 2) % 2]
        given = dev if by == "dev" else None
        run, plan = on_dask(cluster[1], corpus["texts"], mix=mix, parity=rule, dev=given, tie_break=tie_break)
        multipliers = [s.multiplier for s in plan.stats]
        local = learn_parity_merges(
            weighted(counts, multipliers), 500 - 256, rule, merge_rules(tie_break=tie_break), dev=given
        )
        where = f"{name}, {tie_break}, {workers} worker(s)"
        assert run.merges.merges.tolist() == local.merges.tolist(), where
        assert run.merges.languages.tolist() == local.languages.tolist(), where
        assert run.merges.counts.tolist() == local.counts.tolist(), where
        assert (run.merges.stop_reason, run.merges.tokens_after) == (local.stop_reason, local.tokens_after), where
        assert run.merges.rounds == len(run.merges.merges)  # one merge per round
        assert run.engine["word_buckets"] == workers * len(CODES)
        assert run.unique_words == sum(map(len, counts))
    shards = parquet_by_language(corpus, tmp_path)
    for i, mix in enumerate(MIXES):
        if i % 2 != workers % 2 and mix is not MIXES[-1]:
            continue
        tie_break = ("bytes", "ids")[(i + workers // 2) % 2]
        run, plan = on_dask(cluster[1], shards=shards, mix=mix, tie_break=tie_break)
        multipliers = [s.multiplier for s in plan.stats]
        summed = weighted_sum(counts, multipliers)
        local = learn_merges(summed, 500 - 256, merge_rules(tie_break=tie_break))
        assert run.merges.merges.tolist() == local.merges.tolist(), f"{mix}, {tie_break}, {workers} worker(s)"
        assert run.merges.languages is None and run.unique_words == len(summed)
        assert run.engine["word_buckets"] == workers
    assert multipliers == [2, 2, 8, 5]  # eng=1,hin=4,rus=2.5 (and ell 1), the smallest integers
    assert [(s.code, s.documents, s.words, s.unique_words) for s in run.languages] == [
        (code, len(texts), c.total, len(c)) for code, texts, c in zip(CODES, corpus["texts"], counts, strict=True)
    ]
    assert [s.bytes for s in run.languages] == [sum(len(t.encode()) for t in texts) for texts in corpus["texts"]]
    assert run.stats.documents == sum(SENTENCES.values())
    assert all(Path(fp["path"]).parent.name == fp["language"] for fp in run.fingerprints)
    assert sorted({fp["language"] for fp in run.fingerprints}) == list(CODES)
