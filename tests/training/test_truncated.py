"""One run, every vocabulary size: BPE's merges are learnt in order, so the first merges of a large
run are exactly a smaller run's. `Tokenizer.truncated(n)` and `bpe train --also-save` rely on it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import SettingsError
from tests.conftest import stdlib_paragraphs

TEXTS = stdlib_paragraphs()[:1200]
SAMPLES = [*stdlib_paragraphs()[1200:1230], "naïve café 中文 🙂", "<|endoftext|>x", ""]
SPECIALS = ["<|endoftext|>", "<|pad|>"]
OPTIONS = dict(
    pattern="cl100k",
    special_tokens=SPECIALS,
    special_token_roles={"eos": "<|endoftext|>", "bos": "<s>"},
    model_max_length=2048,
)


@pytest.fixture(scope="module")
def big() -> Tokenizer:
    return train(TEXTS, vocab_size=900, **OPTIONS)


@pytest.mark.parametrize("size", [259, 260, 300, 512, 899, 900])
def test_a_truncation_is_the_smaller_training(big, size):
    """Equal merges, special tokens renumbered after them, roles and model_max_length kept: equal
    tokenizers, which encode every sample alike."""
    small = train(TEXTS, vocab_size=size, **OPTIONS)
    cut = big.truncated(size)
    assert cut.merges == small.merges and cut.vocab_size == size == small.vocab_size
    assert cut.special_tokens == small.special_tokens == {t: size - 3 + i for i, t in enumerate([*SPECIALS, "<s>"])}
    assert cut.special_token_roles == small.special_token_roles and cut.model_max_length == 2048
    assert cut == small
    for text in SAMPLES:
        assert cut.encode(text, allowed_special="all") == small.encode(text, allowed_special="all")
    assert cut.encode_batch(SAMPLES, special_as_text=True) == small.encode_batch(SAMPLES, special_as_text=True)


@pytest.mark.parametrize("options", [dict(tie_break="ids"), dict(max_token_length=4), dict(min_frequency=3)])
def test_the_prefix_holds_for_other_settings(options):
    cut = train(TEXTS[:600], vocab_size=800, pattern="gpt2", **options).truncated(500)
    assert cut == train(TEXTS[:600], vocab_size=500, pattern="gpt2", **options)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(st.sampled_from("ab c\n'sé中🙂1"), min_size=1, max_size=30), min_size=1, max_size=8),
    st.integers(256, 320),
    st.integers(0, 64),
    st.sampled_from(["bytes", "ids"]),
)
def test_any_small_corpus_truncates_to_its_smaller_training(texts, size, extra, tie_break):
    if not any(t.split() for t in texts):  # no pre-token: nothing to train on
        return
    tok = train(texts, vocab_size=size + extra, pattern="gpt2", tie_break=tie_break)
    size = min(size, tok.vocab_size)  # pairs may run out first
    assert tok.truncated(size) == train(texts, vocab_size=size, pattern="gpt2", tie_break=tie_break)


@pytest.mark.parametrize("size", [901, 258, 0, 300.0, True, "300"])
def test_a_size_above_the_tokenizer_or_below_its_bytes_and_specials_is_refused(big, size):
    with pytest.raises(SettingsError) as raised:
        big.truncated(size)
    message = str(raised.value)
    assert raised.value.parameter == "vocab_size" and "\n" not in message
    assert message.startswith(
        "vocab_size: expected an integer from 259 (256 bytes + 3 special token(s)) to this tokenizer's 900"
    )


def test_the_truncation_records_what_it_was_cut_from_and_saves_and_loads(big, tmp_path):
    cut = big.truncated(600)
    assert cut.manifest["truncation"] == {"vocab_size": 600, "merges": 341, "of_vocab_size": 900, "of_merges": 641}
    assert cut.manifest["result"]["vocab_size"] == 600 and cut.manifest["result"]["merges"] == 341
    assert cut.manifest["settings"] == big.manifest["settings"]  # the run's settings
    assert big.manifest["result"]["vocab_size"] == 900 and "truncation" not in big.manifest  # untouched
    cut.save(tmp_path / "tok")
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded == cut and loaded.manifest["tokenizer"]["vocab_size"] == 600
    assert Tokenizer.load(tmp_path / "tok").truncated(400) == big.truncated(400)


def test_also_save_writes_the_smaller_tokenizers_of_the_same_run(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(TEXTS))
    out = tmp_path / "tok"
    argv = [
        "train",
        str(path),
        "--vocab-size",
        "900",
        "--pattern",
        "cl100k",
        "--special-token",
        "<|endoftext|>",
        "--eos-token",
        "<|endoftext|>",
        "--out",
        str(out),
    ]
    assert main([*argv, "--also-save", "400,700,400", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["also_saved"] == [{"out": f"{out}-700", "vocab_size": 700}, {"out": f"{out}-400", "vocab_size": 400}]
    full = Tokenizer.load(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt", "tok", "tok-400", "tok-700"]
    for size in (400, 700):
        saved = Tokenizer.load(tmp_path / f"tok-{size}")
        assert saved == full.truncated(size) and saved.vocab_size == size
        assert saved.eos_token_id == size - 1
        manifest = saved.manifest
        assert manifest["truncation"] == {
            "vocab_size": size,
            "merges": size - 257,
            "of_vocab_size": 900,
            "of_merges": 643,
            "of": str(out),
        }
        assert manifest["tokenizer"]["vocab_size"] == size and manifest["data"] == full.manifest["data"]
        for text in SAMPLES[:10]:
            assert saved.encode(text) == full.truncated(size).encode(text)
    assert Tokenizer.load(tmp_path / "tok-400") == train(
        files=[path],
        vocab_size=400,
        pattern="cl100k",
        special_tokens=["<|endoftext|>"],
        special_token_roles={"eos": "<|endoftext|>"},
    )


@pytest.mark.parametrize(
    "sizes, wrong",
    [("900", "'900'"), ("256", "'256'"), ("300,big", "'big'"), ("300,", "''"), ("-300", "'-300'")],
)
def test_also_save_sizes_are_checked_before_training(tmp_path, capsys, sizes, wrong):
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(TEXTS[:50]))
    out = tmp_path / "tok"
    argv = ["train", str(path), "--vocab-size", "900", "--special-token", "<|endoftext|>", "--out", str(out)]
    assert main([*argv, "--also-save", sizes]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "bpe: error: --also-save: expected vocabulary sizes from 257 (256 bytes + special tokens) to below "
        f"--vocab-size 900, separated by commas, got {wrong}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_also_save_refuses_a_size_directory_that_holds_a_tokenizer_before_training(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(TEXTS[:50]))
    train(TEXTS[:50], vocab_size=300).save(tmp_path / "tok-300")
    argv = ["train", str(path), "--vocab-size", "400", "--out", str(tmp_path / "tok"), "--also-save", "300"]
    assert main(argv) == 1
    expected = f"bpe: error: {tmp_path / 'tok-300'}: already holds a tokenizer (use --force to replace it)"
    assert capsys.readouterr().err.strip() == expected
    assert not (tmp_path / "tok").exists()
    assert main([*argv, "--force", "--quiet"]) == 0
    assert Tokenizer.load(tmp_path / "tok-300") == Tokenizer.load(tmp_path / "tok").truncated(300)


def test_a_size_the_run_did_not_reach_is_skipped_with_a_warning(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("abcd abcd ab")
    out = tmp_path / "tok"
    assert main(["train", str(path), "--vocab-size", "400", "--out", str(out), "--also-save", "300,258"]) == 0
    printed = capsys.readouterr().out
    assert "--also-save 300: the run stopped at 261 tokens; not written" in printed
    assert (tmp_path / "tok-258").is_dir() and not (tmp_path / "tok-300").exists()


def test_gpt2s_own_files_truncate_keeping_their_ids():
    """GPT-2's vocab.json numbers the byte tokens in its own order: the kept tokens keep those ids."""
    from tests.conftest import GPT2

    if not (GPT2 / "vocab.json").exists():
        pytest.skip(f"GPT-2's files not found at {GPT2}")
    full = Tokenizer.load(GPT2)
    cut = full.truncated(1000)
    assert cut.vocab_size == 1000 and cut.special_tokens == {"<|endoftext|>": 999}
    assert all(cut.token_to_id(cut.id_to_token(i)) == full.token_to_id(full.id_to_token(i)) == i for i in range(999))
    ids = cut.encode("hello world, the cat")
    assert max(ids) < 999 and cut.decode(ids) == "hello world, the cat"


# -- where --also-save writes: beside --out, in its directory or bucket ------------------------------


def refusal_start(out: str) -> str:
    """How the one line refusing an --out with nothing beside it starts: it names --also-save and --out."""
    return f"bpe: error: --also-save: each size is written beside --out, as <out>-<size>, and --out {out} "


@pytest.mark.parametrize("out", [".", "./", "/", ".."])
def test_also_save_refuses_an_out_with_no_name_before_reading_anything(tmp_path, capsys, monkeypatch, out):
    """`--out .` once wrote a hidden `.-300` inside the output, `--out ..` a `..-300` in the working
    directory: one line naming --also-save and --out instead, nothing written."""
    here = tmp_path / "work" / "here"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(TEXTS[:50]))
    for inputs in ([str(path)], [str(tmp_path / "missing.txt")]):  # refused before the inputs are looked at
        assert main(["train", *inputs, "--vocab-size", "400", "--out", out, "--also-save", "300", "--force"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(refusal_start(out)), err
    assert list((tmp_path / "work").rglob("*")) == [here]  # nothing written, hidden or not
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt", "work"]


@pytest.mark.services
def test_also_save_stays_in_the_bucket_of_out(tmp_path, capsys, s3_env):
    """`--out s3://b/ --also-save 300` once wrote `s3://b-300/`, on AWS someone else's bucket: it is
    refused, nothing written in either; `--out s3://b/tok/` writes `s3://b/tok-300/` beside it."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from tests.conftest import unique_bucket

    s3 = boto3.client("s3")
    bucket = unique_bucket("bpe-also-save")
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=f"{bucket}-300")  # the neighbour's bucket

    def keys(name: str) -> list[str]:
        return sorted(item["Key"] for item in s3.list_objects_v2(Bucket=name).get("Contents", []))

    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(TEXTS[:200]))
    argv = ["train", str(path), "--vocab-size", "400", "--also-save", "300", "--quiet"]
    for out in (f"s3://{bucket}/", f"s3://{bucket}"):
        assert main([*argv, "--out", out]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(refusal_start(out)) and "bucket" in err, err
    assert keys(bucket) == keys(f"{bucket}-300") == []

    assert main([*argv, "--out", f"s3://{bucket}/tok/"]) == 0
    assert keys(f"{bucket}-300") == []
    assert {key.split("/")[0] for key in keys(bucket)} == {"tok", "tok-300"}
    small = Tokenizer.load(f"s3://{bucket}/tok-300/")
    assert small == Tokenizer.load(f"s3://{bucket}/tok/").truncated(300)
    assert small == train(files=[path], vocab_size=300)
