"""Training from an existing tokenizer (`train(..., base=...)`, `bpe train --from`): the base's
merges are replayed on the new words in its order, then training goes on. Checked against the
reference trainer started from the same replayed words, and against Hugging Face, transformers and
tiktoken for the ids of an extended GPT-2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.replay import BaseMerges
from bpe.errors import ExportError, SettingsError
from bpe.training.counting import count_words
from tests.conftest import GPT2, any_merges, ruled, shared_corpus, stdlib_paragraphs
from tests.reference import train_reference

# Few symbols (many ties, multi-byte characters, runs of one byte): as in tests/engine/test_merge.py.
SYMBOLS = ["a", "b", "c", "aa", "é", "中", " ", "x"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=8).map(lambda s: "".join(s).encode())
corpora = st.dictionaries(word, st.integers(1, 6), min_size=1, max_size=25)


def extend(counts: dict[bytes, int], base: list[tuple[int, int]], n: int, **options) -> list[tuple[int, int]]:
    """The base's merges, then `n` more learnt by the local engine after replaying them."""
    rules, options = ruled(options)
    made = learn_merges(
        WordCounts.from_dict(counts), n, rules, base=BaseMerges(np.array(base).reshape(-1, 2)), **options
    )
    return base + [tuple(pair) for pair in made.merges.tolist()]


@settings(max_examples=200, deadline=None)
@given(corpora, st.integers(0, 15), st.integers(0, 15), st.sampled_from(["bytes", "ids"]), st.integers(1, 3))
def test_continuing_on_the_same_corpus_gives_the_merges_of_training_the_larger_size(counts, k, n, tie_break, threads):
    """The base is the reference's first k merges of this corpus: continuing by n gives exactly the
    reference's k + n merges (whatever the threads)."""
    expected = train_reference(counts, k + n, tie_break)
    base = expected[:k]
    assert extend(counts, base, n, tie_break=tie_break, threads=threads) == expected


@settings(max_examples=200, deadline=None)
@given(
    corpora,
    any_merges([s.encode() for s in SYMBOLS], 12),
    st.integers(0, 15),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(2, 6)),
)
def test_on_a_new_corpus_the_base_merges_come_first_then_the_textbook_loop(counts, base, n, tie_break, threads, limit):
    """Any valid base (learnt elsewhere or not at all): its merges unchanged, then what the
    reference picks after applying them one by one to every word."""
    expected = train_reference(counts, n, tie_break, base=base, max_token_length=limit)
    got = extend(counts, base, n, tie_break=tie_break, threads=threads, max_token_length=limit)
    assert got[: len(base)] == base
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(st.sampled_from("ab é中x\n"), max_size=12), min_size=1, max_size=20), st.integers(0, 30))
def test_replaying_the_merges_on_a_word_is_encoding_it(texts, k):
    """Replayed words equal what the base tokenizer's encoder (tiktoken's, when it can) makes of
    each word, the two computed apart."""
    base = train(texts * 3 + ["ab ab é中"], vocab_size=256 + k, pattern="gpt2")
    counts = count_words(texts, "gpt2")
    tokens, lengths = BaseMerges(np.array(base.merges).reshape(-1, 2)).replay(counts)
    words = np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []
    for i, replayed in enumerate(words):
        assert replayed.tolist() == base.encode_ordinary(counts.word(i).decode("utf-8"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return stdlib_paragraphs()[:1500]


def test_the_library_continues_a_tokenizer_and_records_its_base(texts, tmp_path):
    small = train(
        texts,
        vocab_size=500,
        pattern="gpt2",
        special_tokens=["<|endoftext|>"],
        special_token_roles={"eos": "<|endoftext|>"},
    )
    small.save(tmp_path / "small")
    larger = train(texts, vocab_size=700, pattern="gpt2", special_tokens=["<|endoftext|>"])
    for base in (small, tmp_path / "small", str(tmp_path / "small")):
        tok = train(texts, vocab_size=700, base=base)
        assert tok.merges == larger.merges  # the same corpus: the larger size's merges
        assert tok.vocab_size == 700 and tok.pattern == small.pattern
        assert tok.special_tokens == {"<|endoftext|>": 499} and tok.eos_token_id == 499  # kept, with its role
        assert [tok.token_bytes(i) for i in range(499)] == [small.token_bytes(i) for i in range(499)]
        assert [tok.token_to_id(tok.id_to_token(i)) for i in range(500, 700)] == list(range(500, 700))
    record = tok.manifest["base"]
    assert record["source"] == str(tmp_path / "small") and record["vocab_size"] == 500
    assert len(record["sha256"]) == 64 and tok.manifest["result"]["new_merges"] == 200
    tok.save(tmp_path / "extended")
    loaded = Tokenizer.load(tmp_path / "extended")
    assert loaded == tok  # the base's ids survive save and load
    assert loaded.encode("x <|endoftext|>", allowed_special="all")[-1] == 499
    with_pad = train(texts, vocab_size=701, base=small, special_tokens=["<|pad|>"])
    assert with_pad.special_tokens == {"<|endoftext|>": 499, "<|pad|>": 700}  # after the new merges
    cut = tok.truncated(600)
    assert cut.merges == tok.merges[:343] and cut.special_tokens == {"<|endoftext|>": 499}
    assert [cut.token_bytes(i) for i in range(600)] == [tok.token_bytes(i) for i in range(600)]


def test_a_different_pattern_is_allowed_and_recorded(texts):
    small = train(texts, vocab_size=400, pattern="gpt2")
    tok = train(texts, vocab_size=500, base=small, pattern="whitespace")
    assert tok.merges[:144] == small.merges and tok.pattern == "whitespace"
    assert tok.manifest["settings"]["pattern"] == "whitespace"


def test_the_command_extends_and_refuses_bad_bases_in_one_line(texts, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts), encoding="utf-8")
    assert (
        main(
            [
                "train",
                str(corpus),
                "--vocab-size",
                "400",
                "--pattern",
                "gpt2",
                "--out",
                str(tmp_path / "base"),
                "--quiet",
            ]
        )
        == 0
    )
    args = ["train", str(corpus), "--from", str(tmp_path / "base"), "--out", str(tmp_path / "t"), "--json"]
    capsys.readouterr()
    assert main([*args, "--vocab-size", "450", "--also-save", "420"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["vocab_size"] == 450
    tok, base = Tokenizer.load(tmp_path / "t"), Tokenizer.load(tmp_path / "base")
    assert tok.merges[:144] == base.merges and Tokenizer.load(tmp_path / "t-420") == tok.truncated(420)

    def refused(extra: list[str], message: str, out: str = "bad") -> None:
        code = main(["train", str(corpus), "--out", str(tmp_path / out), *extra])
        err = capsys.readouterr().err.strip()
        assert code != 0 and message in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / out).exists()

    refused(["--from", str(tmp_path / "base"), "--vocab-size", "399"], "--vocab-size 399 is smaller than the base")
    refused(
        ["--from", str(tmp_path / "base"), "--vocab-size", "450", "--also-save", "300"], "the --from tokenizer's size"
    )
    refused(["--from", str(tmp_path / "nothing"), "--vocab-size", "450"], "nothing")
    wordpiece = tmp_path / "wordpiece.json"
    tokenizers = pytest.importorskip("tokenizers")
    wp = tokenizers.Tokenizer(tokenizers.models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wp.save(str(wordpiece))
    refused(["--from", str(wordpiece), "--vocab-size", "450"], str(wordpiece))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "vocab.json").write_text((tmp_path / "base" / "vocab.json").read_text(encoding="utf-8"))
    lines = (tmp_path / "base" / "merges.txt").read_text(encoding="utf-8").splitlines()
    later = next(k for k, line in enumerate(lines[1:], 1) if max(map(len, line.split(" "))) > 1)  # joins a merge
    moved = [lines[0], lines[later], *lines[1:later], *lines[later + 1 :]]
    (broken / "merges.txt").write_text("\n".join(moved) + "\n", encoding="utf-8")
    refused(["--from", str(broken), "--vocab-size", "450"], "merges.txt:2")  # uses a token made only later


def test_the_command_reads_a_tiktoken_base_with_its_pattern_and_records_the_base_as_given(texts, tmp_path, capsys):
    """`--from x.tiktoken --pattern gpt2` reads the ranks with the pattern given, and `--from DIR`
    and `--from x.tiktoken` both record the path given as the base's source, as the library does;
    the same base in either format continues into the larger size's merges."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts[:400]), encoding="utf-8")
    train(files=[corpus], vocab_size=400, pattern="gpt2").save(tmp_path / "base")
    ranks = tmp_path / "ranks.tiktoken"
    ranks.write_bytes((tmp_path / "base" / "tokenizer.tiktoken").read_bytes())
    larger = train(files=[corpus], vocab_size=450, pattern="gpt2")
    made = {}
    for name, source, pattern in (("dir", tmp_path / "base", []), ("ranks", ranks, ["--pattern", "gpt2"])):
        argv = ["train", str(corpus), "--from", str(source), *pattern, "--quiet", "--vocab-size"]
        assert main([*argv, "450", "--out", str(tmp_path / name)]) == 0
        made[name] = Tokenizer.load(tmp_path / name)
        assert made[name].manifest["base"]["source"] == str(source)
        assert made[name] == larger  # the same corpus: exactly the larger size
        assert main([*argv, "399", "--out", str(tmp_path / "x")]) == 1
        assert capsys.readouterr().err == (
            f"bpe: error: --vocab-size 399 is smaller than the base tokenizer {source} (400 tokens with the special "
            "tokens); give the final size, at least 400\n"
        )
        assert not (tmp_path / "x").exists()
    assert made["dir"].manifest["base"]["sha256"] == made["ranks"].manifest["base"]["sha256"]
    tok = train(files=[corpus], vocab_size=450, base=str(ranks), pattern="gpt2")
    assert tok == larger and tok.manifest["base"]["source"] == str(ranks)
    hf_json = tmp_path / "base" / "tokenizer.json"  # records its own pattern: the one given is the run's
    other = train(files=[corpus], vocab_size=450, base=str(hf_json), pattern="whitespace")
    assert other.pattern == "whitespace" and other.merges[:144] == larger.merges[:144]
    with pytest.raises(SettingsError, match=r"^vocab_size 399 is smaller than the base tokenizer \(400 tokens"):
        train(files=[corpus], vocab_size=399, base=Tokenizer.load(tmp_path / "base"))


@pytest.mark.services
def test_a_base_url_that_cannot_be_read_is_one_line_naming_it(texts, tmp_path, capsys, s3_env, monkeypatch):
    """`--from s3://...` without credentials is one line naming the URL."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from tests.conftest import drop_s3_credentials, unique_bucket

    bucket = unique_bucket("bpe-extend")
    boto3.client("s3").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/base/"
    train(texts[:300], vocab_size=300).save(url)
    assert train(texts[:300], vocab_size=320, base=url).manifest["base"]["source"] == url  # with credentials
    drop_s3_credentials(monkeypatch, tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts[:300]), encoding="utf-8")
    out = tmp_path / "tok"
    assert main(["train", str(corpus), "--from", url, "--vocab-size", "320", "--out", str(out), "--quiet"]) == 1
    reason = "(NoCredentialsError: Unable to locate credentials)"
    assert capsys.readouterr().err == f"bpe: error: --from: cannot read {url} {reason}\n"
    assert not out.exists()
    with pytest.raises(SettingsError) as raised:
        train(texts[:300], vocab_size=320, base=url)
    assert raised.value.parameter == "base" and str(raised.value) == f"base: cannot read {url} {reason}"


def test_a_base_that_repeats_a_merge_is_not_a_bpe_sequence():
    with pytest.raises(SettingsError, match=r"base: a Tokenizer: merge 2 repeats merge 0"):
        train(["ab ab"], vocab_size=300, base=Tokenizer([(97, 98), (98, 97), (97, 98)]))


def test_a_base_file_that_repeats_a_merge_is_refused_at_the_repeat_before_reading_on(texts, tmp_path, capsys):
    """merges.txt repeating its first merge at line 4, followed by a line that is not UTF-8: the
    base is refused for the repeat, naming its line, so nothing after it was read. The same files
    load as a tokenizer (Hugging Face applies a repeated pair at its later place, and so does it)."""
    train(texts[:300], vocab_size=300, pattern="gpt2").save(tmp_path / "saved")
    base = tmp_path / "base"
    base.mkdir()
    (base / "vocab.json").write_bytes((tmp_path / "saved" / "vocab.json").read_bytes())
    lines = (tmp_path / "saved" / "merges.txt").read_bytes().splitlines()
    (base / "merges.txt").write_bytes(b"\n".join([*lines[:3], lines[1], *lines[3:]]) + b"\n")
    assert Tokenizer.load(base).merges[2] == Tokenizer.load(base).merges[0]
    (base / "merges.txt").write_bytes(b"\n".join([*lines[:3], lines[1], b"\xff\xfe \xff", *lines[3:]]) + b"\n")
    first = lines[1].decode()
    message = (
        f"{base / 'merges.txt'}:4: merge 2 ({first}) repeats merge 0, so it could never apply; the merges are not "
        "a BPE sequence"
    )
    with pytest.raises(ExportError) as raised:
        train(texts[:300], vocab_size=320, base=base)
    assert str(raised.value) == message
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts[:300]), encoding="utf-8")
    out = tmp_path / "t"
    assert main(["train", str(corpus), "--from", str(base), "--vocab-size", "320", "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err == f"bpe: error: {message}\n"
    assert not out.exists()


@pytest.mark.services  # starts a Dask cluster: the slow tier, as tests/distributed/test_dask.py
def test_the_dask_engine_replays_on_the_workers_and_gives_the_local_merges(texts):
    """Two workers, each replaying the base on its word bucket. A new corpus: the local engine's
    tokenizer, whose merges are the reference's after the same replay. The same corpus: the
    merges of training the larger size from nothing."""
    distributed = pytest.importorskip("distributed")
    words = texts[:800]
    base = train(words[:300], vocab_size=400, pattern="cl100k", special_tokens=["<|endoftext|>"])
    expected = {tb: train(words, vocab_size=550, base=base, tie_break=tb) for tb in ("bytes", "ids")}
    counts = count_words(words, "cl100k").to_dict()
    assert expected["ids"].merges == train_reference(counts, 550 - 400, "ids", base=base.merges)
    same_base = {tb: train(words, vocab_size=400, pattern="cl100k", tie_break=tb) for tb in ("bytes", "ids")}
    from_nothing = {tb: train_reference(counts, 550 - 256, tb) for tb in ("bytes", "ids")}
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    try:
        with distributed.Client(cluster) as client:
            for tie_break in ("bytes", "ids"):
                tok = train(words, vocab_size=550, base=base, tie_break=tie_break, engine="dask", client=client)
                assert tok.manifest["engine"]["word_buckets"] == 2
                assert tok == expected[tie_break]
                continued = train(
                    words, vocab_size=550, base=same_base[tie_break], tie_break=tie_break, engine="dask", client=client
                )
                assert continued.merges == from_nothing[tie_break]
    finally:
        cluster.close()


def gpt2_files():
    if not (GPT2 / "vocab.json").exists() or not (GPT2 / "merges.txt").exists():
        pytest.skip(f"GPT-2 files not found at {GPT2}")
    return GPT2


def test_gpt2_extended_by_100_merges_keeps_its_ids_and_loads_everywhere_with_equal_ids(tmp_path, capsys):
    """The done-when: `bpe train corpus --from gpt2 --vocab-size 50357` keeps GPT-2's 50,000 merges
    and 50,257 ids, adds 100, and Hugging Face, transformers and tiktoken give its ids on 1,000 rows."""
    gpt2 = gpt2_files()
    import pyarrow.parquet as pq

    rows = [t for t in pq.read_table(shared_corpus() / "part-00005.parquet").column("text").to_pylist() if t]
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pq.read_table(shared_corpus() / "part-00005.parquet").slice(0, 20_000), corpus)
    out = tmp_path / "t"
    assert main(["train", str(corpus), "--from", str(gpt2), "--vocab-size", "50357", "--out", str(out), "--quiet"]) == 0
    tok, base = Tokenizer.load(out), Tokenizer.load(gpt2)
    assert tok.merges[:50000] == base.merges and len(tok.merges) == 50100 and tok.vocab_size == 50357
    vocab = json.loads((gpt2 / "vocab.json").read_text(encoding="utf-8"))
    ours = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in ours.items() if v < 50257} == vocab  # every GPT-2 id means what it meant
    assert sorted(v for v in ours.values() if v >= 50257) == list(range(50257, 50357))
    assert tok.special_tokens == {"<|endoftext|>": 50256}

    import tiktoken
    import transformers
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import Tokenizer as HFTokenizer

    from tests.formats.test_interop import R50K_PATTERN

    hf = HFTokenizer.from_file(str(out / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    encoding = tiktoken.Encoding(
        "gpt2-extended",
        pat_str=R50K_PATTERN,
        mergeable_ranks=load_tiktoken_bpe(str(out / "tokenizer.tiktoken")),
        special_tokens={"<|endoftext|>": 50256},
    )
    sample = rows[20_000:21_000]
    ids = tok.encode_batch(sample)
    assert any(i >= 50257 for row in ids for i in row)  # the new tokens are used
    assert [e.ids for e in hf.encode_batch(sample, add_special_tokens=False)] == ids
    assert [auto.encode(row, add_special_tokens=False) for row in sample] == ids
    assert encoding.encode_ordinary_batch(sample) == ids
    assert [tok.decode(row) for row in ids] == sample
