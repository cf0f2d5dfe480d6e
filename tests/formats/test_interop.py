"""Interop with the tools users already have: transformers reads our directories (roles, padding,
model_max_length), tiktoken's Encoding carries a tokenizer there and back, and `Tokenizer.load`
reads what Hugging Face `tokenizers`, GPT-2's release and tiktoken make.

Every expected id comes from an independent implementation (Hugging Face `tokenizers`,
`transformers`, tiktoken), never from our own output.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tiktoken
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import data_gym_to_mergeable_bpe_ranks, load_tiktoken_bpe
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

import bpe
from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import ExportError, NotApplied, SettingsError
from bpe.formats.hf_json import HF_FILE, hf_split_regex
from bpe.formats.spelling import bytes_to_unicode, unicode_to_bytes
from bpe.formats.tiktoken_ranks import TIKTOKEN_FILE
from bpe.formats.transformers_config import CONFIG_FILE, SPECIAL_MAP_FILE
from bpe.pretokenize import NAMED_PATTERNS
from tests.conftest import GPT2
from tests.conftest import any_text as any_text_of

BPE = str(Path(sys.executable).parent / "bpe")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: never reach for the hub

# GPT-2's split pattern as tiktoken's `gpt2` encoding spells it.
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
any_text = any_text_of("ab1 '")
TRICKY = [
    "Hello world!  It's 2024... naïve café 中文 🙂\n\n  x",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nnewlines\n\n\nend\n ",
    "numbers 1234567 and 3.14159, emoji 👨‍👩‍👧 and marks é",
    "CamelCase WordPress HTTPServer I'M YOU'RE we'll they'VE",
    "a\xa0b c\x85d e\u3000f",
    "",
]


def builtin_texts() -> list[str]:
    """Real text that is always here: the paragraphs of this package's own source files (its loose
    modules and the training, languages and evaluation packages)."""
    texts = []
    package = Path(bpe.__file__).parent
    folders = [package] + [package / name for name in ("training", "languages", "evaluation")]
    for path in [path for folder in folders for path in sorted(folder.glob("*.py"))]:
        texts += [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return texts


BUILTIN = builtin_texts()


def dump_ranks(ranks: dict[bytes, int], path: Path) -> None:
    """A tiktoken ranks file as tiktoken's own dump function writes it (which needs blobfile)."""
    lines = [f"{base64.b64encode(token).decode()} {rank}" for token, rank in sorted(ranks.items(), key=lambda t: t[1])]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


def independent_encoding(directory: Path, pattern_regex: str, special_tokens: dict[str, int]) -> tiktoken.Encoding:
    """tiktoken reading our saved ranks file with its own loader."""
    ranks = load_tiktoken_bpe(str(directory / TIKTOKEN_FILE))
    return tiktoken.Encoding("ref", pat_str=pattern_regex, mergeable_ranks=ranks, special_tokens=special_tokens)


# -- transformers-ready directories ----------------------------------------------------------------


def auto_tokenizer(directory: Path):
    return transformers.AutoTokenizer.from_pretrained(str(directory))


def assert_padded_batch_is_ours(tok: Tokenizer, directory: Path, texts: list[str]) -> None:
    """transformers pads the batch with our pad id, and each row holds exactly our ids."""
    hf = auto_tokenizer(directory)
    batch = hf(texts, padding=True)
    assert hf.pad_token_id == tok.pad_token_id is not None
    longest = max(len(tok.encode(text, allowed_special="all")) for text in texts)  # transformers' way
    for text, ids, mask in zip(texts, batch["input_ids"], batch["attention_mask"], strict=True):
        n = sum(mask)
        assert len(ids) == longest and mask == [1] * n + [0] * (longest - n)
        assert ids[:n] == tok.encode(text, allowed_special="all"), repr(text[:80])
        assert ids[n:] == [tok.pad_token_id] * (longest - n)


@pytest.fixture(scope="module", params=["gpt2", "cl100k", "o200k", "whitespace"])
def with_roles(request, corpus_rows, tmp_path_factory):
    """Trained on real text with an eos and a pad role (the pad token added by its role), saved."""
    tok = train(
        corpus_rows[:1500],
        vocab_size=1000,
        pattern=request.param,
        special_tokens=["<|endoftext|>"],
        special_token_roles={"eos": "<|endoftext|>", "pad": "<|pad|>"},
    )
    out = tmp_path_factory.mktemp(f"roles-{request.param}") / "tok"
    tok.save(out)
    return tok, out


def test_transformers_pads_real_text_with_our_ids(with_roles, corpus_rows):
    tok, out = with_roles
    texts = corpus_rows[1500:1564] + TRICKY
    assert_padded_batch_is_ours(tok, out, texts)
    hf = auto_tokenizer(out)
    assert (hf.eos_token, hf.pad_token, hf.bos_token, hf.unk_token) == ("<|endoftext|>", "<|pad|>", None, None)
    assert len(hf) == len(tok) == 1000
    if tok.pattern != "whitespace":  # str.split() drops the spaces: no decoder gives them back
        for text in texts[:20]:
            assert hf.decode(tok.encode(text)) == text


def test_transformers_reads_every_role_on_builtin_text(tmp_path):
    """Never skipped: the package's own text, all four roles, bos among the listed special tokens."""
    roles = {"bos": "<|startoftext|>", "eos": "<|endoftext|>", "pad": "<|pad|>", "unk": "<|unk|>"}
    tok = train(
        BUILTIN,
        vocab_size=700,
        pattern="cl100k",
        special_tokens=["<|startoftext|>", "<|other|>"],
        special_token_roles=roles,
    )
    assert list(tok.special_tokens) == ["<|startoftext|>", "<|other|>", "<|endoftext|>", "<|pad|>", "<|unk|>"]
    assert tok.vocab_size == 700 and tok.special_token_roles == roles
    tok.save(tmp_path / "tok")
    hf = auto_tokenizer(tmp_path / "tok")
    for role, token in roles.items():
        assert getattr(hf, f"{role}_token") == token
        assert getattr(hf, f"{role}_token_id") == getattr(tok, f"{role}_token_id") == tok.special_tokens[token]
    texts = BUILTIN[:40] + TRICKY + ["a<|endoftext|>b<|other|>c"]
    assert_padded_batch_is_ours(tok, tmp_path / "tok", texts)
    assert hf.decode(tok.encode("x<|other|>y", allowed_special="all"), skip_special_tokens=True) == "xy"  # special


def test_roles_round_trip_through_the_manifest(tmp_path):
    tok = train(BUILTIN[:200], vocab_size=400, pattern="gpt2", special_token_roles={"eos_token": "<|endoftext|>"})
    tok.save(tmp_path / "tok")
    manifest = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    assert manifest["tokenizer"]["special_token_roles"] == {"eos": "<|endoftext|>"}
    assert set(manifest["files"]) >= {CONFIG_FILE, SPECIAL_MAP_FILE}
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded == tok and loaded.special_token_roles == {"eos": "<|endoftext|>"}
    assert loaded.eot_token == loaded.eos_token_id == tok.special_tokens["<|endoftext|>"]
    loaded.save(tmp_path / "again")
    for name in (CONFIG_FILE, SPECIAL_MAP_FILE):
        assert (tmp_path / "again" / name).read_text() == (tmp_path / "tok" / name).read_text()


def test_a_directory_from_before_roles_loads_with_none(tmp_path):
    tok = train(BUILTIN[:200], vocab_size=400, pattern="gpt2", special_tokens=["<|endoftext|>"])
    tok.save(tmp_path / "tok")
    manifest_path = tmp_path / "tok" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert "special_token_roles" not in manifest["tokenizer"]  # none set: no key for them
    for name in (CONFIG_FILE, SPECIAL_MAP_FILE):  # as a directory written before these files existed
        (tmp_path / "tok" / name).unlink()
        del manifest["files"][name]
    manifest_path.write_text(json.dumps(manifest))
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded == tok and loaded.special_token_roles == {} and loaded.pad_token_id is None
    assert loaded.eot_token == tok.special_tokens["<|endoftext|>"]  # no eos role: <|endoftext|>


def test_role_errors_are_one_line():
    tok_args = ([(104, 105)], "gpt2", ["<|endoftext|>"])
    with pytest.raises(SettingsError, match=r"^pad_token: '<\|pad\|>' is not a special token of this tokenizer"):
        Tokenizer(*tok_args, special_token_roles={"pad": "<|pad|>"})
    with pytest.raises(SettingsError, match=r"^special_token_roles: unknown role 'cls'"):
        train(["some text"], vocab_size=260, special_token_roles={"cls": "<|cls|>"})
    with pytest.raises(SettingsError, match=r"^eos_token: expected a non-empty token"):
        train(["some text"], vocab_size=260, special_token_roles={"eos": ""})
    with pytest.raises(SettingsError, match=r"^vocab_size 257 is too small"):
        train(["some text"], vocab_size=257, special_token_roles={"eos": "<|endoftext|>", "pad": "<|pad|>"})


def test_the_train_command_takes_role_flags(tmp_path, capsys):
    data = tmp_path / "data.txt"
    data.write_text("\n\n".join(BUILTIN[:100]), encoding="utf-8")
    out = tmp_path / "tok"
    argv = [
        "train",
        str(data),
        "--vocab-size",
        "400",
        "--special-token",
        "<|endoftext|>",
        "--eos-token",
        "<|endoftext|>",
        "--pad-token",
        "<|pad|>",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    tok = Tokenizer.load(out)
    assert tok.special_token_roles == {"eos": "<|endoftext|>", "pad": "<|pad|>"} and tok.vocab_size == 400
    assert_padded_batch_is_ours(tok, out, BUILTIN[:8])
    capsys.readouterr()
    assert main(["train", str(data), "--vocab-size", "400", "--eos-token", "", "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bpe: error: --eos-token: expected a non-empty token, got ''"]


def test_model_max_length_makes_transformers_truncate(tmp_path, capsys):
    data = tmp_path / "data.txt"
    data.write_text("\n\n".join(BUILTIN[:400]), encoding="utf-8")
    args = [
        "train",
        str(data),
        "--vocab-size",
        "600",
        "--eos-token",
        "<|endoftext|>",
        "--model-max-length",
        "32",
        "--out",
        str(tmp_path / "tok"),
        "--quiet",
    ]
    assert main(args) == 0
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf.model_max_length == 32
    long_text = " ".join(BUILTIN[:20])
    assert len(hf(long_text, truncation=True)["input_ids"]) == 32
    assert len(hf(long_text)["input_ids"]) > 32
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.model_max_length == 32
    assert Tokenizer.load(tmp_path / "tok" / "tokenizer.json").model_max_length == 32  # read from tokenizer_config
    with pytest.raises(SystemExit):
        main(["train", str(data), "--vocab-size", "300", "--model-max-length", "x", "--out", str(tmp_path / "t2")])
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                str(data),
                "--vocab-size",
                "300",
                "--model-max-length",
                "0",
                "--out",
                str(tmp_path / "t2"),
                "--quiet",
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.startswith("bpe: error: --model-max-length: expected a positive integer")
    assert not (tmp_path / "t2").exists()


def test_without_model_max_length_the_config_has_none(tmp_path):
    Tokenizer([(104, 105)]).save(tmp_path / "tok")
    assert "model_max_length" not in json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())


# -- loading what others make ----------------------------------------------------------------------


def hf_trained(texts: list[str], pre_tokenizer, vocab_size: int = 700) -> HFTokenizer:
    """A byte-level BPE trained by Hugging Face `tokenizers` itself (its ids: special tokens first)."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizer
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer)
    return hf


def split_then_bytes(regex: str):
    """Hugging Face's pre-tokenizer for a split regex: Split (pieces isolated), then ByteLevel."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


CL100K_HF = hf_split_regex("cl100k", NAMED_PATTERNS["cl100k"])[0]  # Llama 3's regex, as Oniguruma reads it
CUSTOM = r" ?\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"
HF_STYLES = {
    "ByteLevel (GPT-2's regex)": (lambda: pre_tokenizers.ByteLevel(add_prefix_space=False), "gpt2"),
    "Split + ByteLevel (Llama 3 style)": (lambda: split_then_bytes(CL100K_HF), "cl100k"),
    "Split by a custom regex + ByteLevel": (lambda: split_then_bytes(CUSTOM), CUSTOM),
}


@pytest.fixture(scope="module", params=list(HF_STYLES))
def hf_made(request, tmp_path_factory):
    """A tokenizer.json trained by Hugging Face on built-in text, alone in a directory."""
    make, pattern = HF_STYLES[request.param]
    hf = hf_trained(BUILTIN, make())
    directory = tmp_path_factory.mktemp("hf-made")
    hf.save(str(directory / HF_FILE))
    return hf, directory, pattern


def test_a_hugging_face_tokenizer_json_loads_as_a_file_or_a_directory(hf_made):
    hf, directory, pattern = hf_made
    from_file, from_dir = Tokenizer.load(directory / HF_FILE), Tokenizer.load(directory)
    assert from_file == from_dir and from_file.pattern == pattern
    assert from_file.special_tokens == {"<|endoftext|>": 0, "<|pad|>": 1}  # HF puts them first
    assert from_file.get_vocab() == hf.get_vocab() and len(from_file) == hf.get_vocab_size()
    for text in BUILTIN[::7] + TRICKY + ["x<|endoftext|>y<|pad|>"]:
        ids = from_file.encode(text, allowed_special="all")  # as Hugging Face encodes added tokens
        assert ids == hf.encode(text).ids, repr(text[:80])
        assert from_file.decode(ids) == hf.decode(ids, skip_special_tokens=False) == text


def test_a_hugging_face_tokenizer_json_gives_its_ids_on_real_text(hf_made, corpus_rows):
    hf, directory, _ = hf_made
    ours = Tokenizer.load(directory)
    rows = corpus_rows[:600]
    assert ours.encode_batch(rows) == [e.ids for e in hf.encode_batch(rows)]


@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_a_hugging_face_tokenizer_json_gives_its_ids_on_any_text(hf_made, text):
    hf, directory, _ = hf_made
    assert Tokenizer.load(directory).encode(text, allowed_special="all") == hf.encode(text).ids  # HF: added tokens


def hf_bpe_file(path: Path, merges: list[tuple[str, str]], pre_tokenizer=None) -> HFTokenizer:
    """A byte-level tokenizer.json of these merges (of tokens spelled as GPT-2 spells them), each new
    token numbered after the 256 bytes as it is first made, written and read by Hugging Face."""
    vocab = {bytes_to_unicode()[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    hf = HFTokenizer(models.BPE(vocab, merges))
    hf.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.save(str(path))
    return HFTokenizer.from_file(str(path))


@st.composite
def letter_merges(draw) -> list[tuple[str, str]]:
    """Merges of the tokens of a, b and c, each joining two tokens made before it, no pair twice
    (Hugging Face would save the later one only) but a token by two pairs now and then: in any
    order, so that merging by rank often reaches a token through a pair no merge joins."""
    tokens, merges = ["a", "b", "c"], []
    for _ in range(draw(st.integers(0, 12))):
        pair = (draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens)))
        if pair not in merges:
            merges.append(pair)
            tokens.append(pair[0] + pair[1])
    return merges


def test_a_token_its_merges_never_reach_encodes_as_hugging_face_does(tmp_path):
    """Merges (b c), (a b), (ab c): "abc" is a token, but "ab" never stands before "c", so Hugging
    Face gives [a, bc]. Merging by rank (tiktoken) would give [abc]: the merges are applied in order
    instead, the tiktoken ranks file is left out of a save, and to_tiktoken refuses in one line."""
    hf = hf_bpe_file(tmp_path / HF_FILE, [("b", "c"), ("a", "b"), ("ab", "c")])
    tok = Tokenizer.load(tmp_path / HF_FILE)
    texts = ["abc", "xabcab abc", "cabcabc", ""]
    expected = [e.ids for e in hf.encode_batch(texts)]
    assert expected[0] == [97, 256]
    assert [tok.encode(t) for t in texts] == tok.encode_batch(texts) == expected
    ids, offsets = tok.encode_batch_to_numpy(texts)
    assert [ids[offsets[k] : offsets[k + 1]].tolist() for k in range(len(texts))] == expected
    with pytest.raises(ExportError) as raised:
        tok.to_tiktoken()
    assert str(raised.value) == (
        "tiktoken cannot encode as this tokenizer does: encoding by rank (tiktoken's) makes 'abc' one token, which "
        "its merges never make: merge 2 joins 'ab' and 'c', which the merges before it never leave side by side"
    )
    tok.save(tmp_path / "saved")
    assert not (tmp_path / "saved" / TIKTOKEN_FILE).exists()
    assert Tokenizer.load(tmp_path / "saved").encode_batch(texts) == expected
    assert HFTokenizer.from_file(str(tmp_path / "saved" / HF_FILE)).encode("abc").ids == [97, 256]


@settings(max_examples=300, deadline=None)
@given(merges=letter_merges(), texts=st.lists(st.text("abc ", max_size=12), min_size=1, max_size=4))
def test_any_merges_of_a_tokenizer_json_give_hugging_faces_ids(tmp_path_factory, merges, texts):
    """Every byte-level tokenizer.json of small random merges loads and gives Hugging Face's ids;
    those whose merges tiktoken can stand for give tiktoken's too."""
    path = tmp_path_factory.mktemp("merges") / HF_FILE
    hf = hf_bpe_file(path, merges)
    tok = Tokenizer.load(path)
    expected = [e.ids for e in hf.encode_batch(texts)]
    assert tok.encode_batch(texts) == expected
    try:
        encoding = tok.to_tiktoken()
    except ExportError:
        return
    assert encoding.encode_ordinary_batch(texts) == expected


def test_a_tokenizer_jsons_truncation_and_padding_are_said_not_to_be_applied(tmp_path):
    """Hugging Face applies a tokenizer.json's truncation and padding to every encode; a Tokenizer
    gives the whole text's ids, unpadded (what Hugging Face gives without them), and says so as it
    loads the file, naming it and both settings; the command in one line. A file without them loads
    without a word."""
    hf = hf_trained(BUILTIN, pre_tokenizers.ByteLevel(add_prefix_space=False))
    hf.enable_truncation(max_length=5)
    hf.enable_padding(length=5, pad_id=1, pad_token="<|pad|>")
    path = tmp_path / HF_FILE
    hf.save(str(path))
    assert len(hf.encode(BUILTIN[0]).ids) == 5 and hf.encode("a").ids[1:] == [1, 1, 1, 1]
    message = (
        f"{path}: its truncation (to 5 tokens) and padding (to 5 tokens) are not applied: encode gives the ids "
        "of the whole text, unpadded (as Hugging Face's encode does after no_truncation() and no_padding())"
    )
    with pytest.warns(NotApplied) as warned:
        tok = Tokenizer.load(path)
    assert [str(w.message) for w in warned] == [message]
    done = subprocess.run([BPE, "encode", str(path), "--text", "hello"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.splitlines() == [f"bpe: warning: {message}"], done.stderr
    hf.no_truncation()
    hf.no_padding()
    assert tok.encode_batch(BUILTIN[:20]) == [e.ids for e in hf.encode_batch(BUILTIN[:20])]
    assert len(tok.encode(BUILTIN[0])) > 5
    hf.save(str(tmp_path / "plain.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Tokenizer.load(tmp_path / "plain.json") == tok


def test_our_own_tokenizer_json_alone_loads_as_the_same_tokenizer(tmp_path):
    tok = train(
        BUILTIN,
        vocab_size=600,
        pattern="o200k",
        special_tokens=["<|endoftext|>"],
        special_token_roles={"pad": "<|pad|>"},
    )
    tok.save(tmp_path / "tok")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "tok" / HF_FILE, alone / HF_FILE)
    assert Tokenizer.load(alone) == Tokenizer(tok.merges, "o200k", tok.special_tokens)  # no roles without the config
    shutil.copy(tmp_path / "tok" / CONFIG_FILE, alone / CONFIG_FILE)
    again = Tokenizer.load(alone)
    assert again == tok and not again._vocabulary.foreign_ids
    again.save(tmp_path / "resaved")  # our own ids: it can be saved again
    with pytest.raises(SettingsError, match=r"^pattern: .*tokenizer\.json records its own split regex"):
        Tokenizer.load(alone / HF_FILE, pattern="gpt2")
    with pytest.raises(SettingsError, match=r"^special_tokens: .* special_tokens is only for a \.tiktoken file"):
        Tokenizer.load(alone, special_tokens=["<|x|>"])


def unsupported_json(tmp_path: Path, hf: HFTokenizer) -> str:
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    with pytest.raises(ExportError, match=re.escape(str(path.parent))):
        Tokenizer.load(path.parent)
    return message


def test_a_wordpiece_tokenizer_json_is_refused_naming_the_file_and_the_model(tmp_path):
    hf = HFTokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    assert "model type 'WordPiece' is not supported" in unsupported_json(tmp_path, hf)


def test_a_bpe_without_byte_level_is_refused_naming_what_it_has(tmp_path):
    hf = hf_trained(BUILTIN[:50], pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=300)
    hf.pre_tokenizer = pre_tokenizers.Metaspace()
    assert "pre_tokenizer Metaspace is not supported" in unsupported_json(tmp_path, hf)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert "add_prefix_space=true" in unsupported_json(tmp_path, hf)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.normalizer = normalizers.NFC()
    assert "normalizer NFC is not supported" in unsupported_json(tmp_path, hf)


def test_a_bpe_whose_vocabulary_is_not_byte_spelled_is_refused(tmp_path):
    hf = HFTokenizer(models.BPE({"a": 0, "b": 1, "ab": 2, "中": 3}, [("a", "b")]))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    assert "pre_tokenizer Whitespace is not supported" in unsupported_json(tmp_path, hf)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert "is not spelled with GPT-2's byte characters" in unsupported_json(tmp_path, hf)


# Bytes no UTF-8 text holds: a Hugging Face BPE trained without `initial_alphabet` lacks them.
NEVER_IN_UTF8 = [0xC0, 0xC1, *range(0xF5, 0x100)]
# Text holding every other byte: ASCII, every lead byte of 2-, 3- and 4-byte characters, every
# continuation byte (chr(0x80 + i) is C2 followed by 0x80 + i).
EVERY_VALID_BYTE = "".join(
    [chr(c) for c in range(128)]
    + [chr(lead << 6) for lead in range(0x02, 0x20)]  # lead bytes C2-DF
    + [chr(lead << 12 | 0x800 * (lead == 0)) for lead in range(0x10)]  # E0-EF (E0 needs U+0800 up)
    + [chr(lead << 18 | 0x10000 * (lead == 0)) for lead in range(5)]  # F0-F4
    + [chr(0x80 + i) for i in range(64)]
)


def hf_without_initial_alphabet(texts: list[str], vocab_size: int = 600) -> HFTokenizer:
    """A byte-level BPE trained by Hugging Face as most are: no `initial_alphabet`, so its
    vocabulary holds only the bytes its training text holds."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False))
    return hf


@pytest.fixture(scope="module")
def hf_lacking_never_valid_bytes(tmp_path_factory) -> tuple[HFTokenizer, Path]:
    hf = hf_without_initial_alphabet(BUILTIN + [EVERY_VALID_BYTE] * 3)
    byte_chars = bytes_to_unicode()
    lacking = sorted(b for b in range(256) if byte_chars[b] not in hf.get_vocab())
    assert lacking == NEVER_IN_UTF8  # exactly the case: every byte text can hold, none of the others
    path = tmp_path_factory.mktemp("hf-no-alphabet") / HF_FILE
    hf.save(str(path))
    return hf, path


def test_a_hugging_face_bpe_lacking_the_bytes_utf8_never_holds_loads_with_its_ids(hf_lacking_never_valid_bytes):
    hf, path = hf_lacking_never_valid_bytes
    ours = Tokenizer.load(path)
    assert ours.get_vocab() == hf.get_vocab() and len(ours) == hf.get_vocab_size()
    assert ours.n_vocab == max(hf.get_vocab().values()) + 1
    for text in BUILTIN[::5] + TRICKY + [EVERY_VALID_BYTE]:
        ids = ours.encode(text)
        assert ids == hf.encode(text, add_special_tokens=False).ids, repr(text[:80])
        assert ours.decode(ids) == text
    assert ours.token_to_id("À") is None and hf.token_to_id("À") is None
    with pytest.raises(KeyError):
        ours.encode_single_token(b"\xc0")


@settings(max_examples=300, deadline=None)
@given(text=any_text)
def test_a_hugging_face_bpe_lacking_the_bytes_utf8_never_holds_gives_its_ids_on_any_text(
    hf_lacking_never_valid_bytes, text
):
    hf, path = hf_lacking_never_valid_bytes
    assert Tokenizer.load(path).encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_a_tokenizer_lacking_those_bytes_is_saved_and_exported_without_inventing_ids(
    hf_lacking_never_valid_bytes, tmp_path
):
    hf, path = hf_lacking_never_valid_bytes
    ours = Tokenizer.load(path)
    ours.save(tmp_path / "tok")
    for name in ("vocab.json", HF_FILE):
        again = HFTokenizer.from_file(str(tmp_path / "tok" / HF_FILE)) if name == HF_FILE else None
        written = json.loads((tmp_path / "tok" / name).read_text(encoding="utf-8"))
        vocab = written["model"]["vocab"] if name == HF_FILE else written
        assert vocab == hf.get_vocab(), name  # the same ids, no entry for a byte the original lacked
        if again is not None:
            assert [e.ids for e in again.encode_batch(TRICKY)] == [e.ids for e in hf.encode_batch(TRICKY)]
    ranks = load_tiktoken_bpe(str(tmp_path / "tok" / TIKTOKEN_FILE))
    assert ranks == {bytes(unicode_to_bytes()[c] for c in spelled): i for spelled, i in hf.get_vocab().items()}
    encoding = tiktoken.Encoding("ref", pat_str=R50K_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert encoding.encode_ordinary_batch(TRICKY) == [e.ids for e in hf.encode_batch(TRICKY)]
    assert Tokenizer.load(tmp_path / "tok") == ours
    assert Tokenizer.load(tmp_path / "tok" / TIKTOKEN_FILE, pattern="gpt2") == ours
    assert ours.truncated(400).get_vocab() == {t: i for t, i in hf.get_vocab().items() if i < 400}


def test_training_from_a_tokenizer_lacking_those_bytes_fills_the_vocabulary_asked_for(hf_lacking_never_valid_bytes):
    """`vocab_size` counts ids, so a base without ids for the 13 bytes leaves room for 13 more
    merges: the extended tokenizer has exactly the size asked for, its first ids Hugging Face's, and
    the merges of extending the same merges with every byte present by as many."""
    hf, path = hf_lacking_never_valid_bytes
    base = Tokenizer.load(path)
    texts = [t.upper() for t in BUILTIN[:400]]
    extended = train(texts, vocab_size=len(base) + 40, base=str(path))
    assert len(extended) == extended.vocab_size == len(base) + 40 and len(extended.merges) == len(base.merges) + 40
    assert {t: i for t, i in extended.get_vocab().items() if i < len(base)} == hf.get_vocab()
    with_every_byte = Tokenizer(base.merges, base.pattern)  # the same merges, with all 256 byte ids
    assert len(with_every_byte) == len(base) + 13
    assert extended.merges == train(texts, vocab_size=len(with_every_byte) + 40, base=with_every_byte).merges


def test_a_vocabulary_lacking_a_byte_text_can_hold_is_refused_in_one_line(tmp_path):
    """Hugging Face drops such a byte from the text without a word; this refuses the file instead."""
    hf = hf_without_initial_alphabet(["only ascii letters here"] * 5, vocab_size=300)
    assert hf.encode("naïve").ids == hf.encode("nave").ids  # what Hugging Face does with it
    path = tmp_path / HF_FILE
    hf.save(str(path))
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path)
    message = str(raised.value)
    assert "\n" not in message  # byte 0 is the first that the text lacks
    assert message.startswith(f"{path}: model.vocab: lacks the byte token 'Ā' (byte 0x00)")
    assert "Hugging Face drops it silently" in message


def gpt2_style_directory(directory: Path) -> list[str]:
    """A directory holding GPT-2-style vocab.json + merges.txt made by Hugging Face (its model's own
    save), with `<|endoftext|>` last in vocab.json as GPT-2's is; the merge lines."""
    hf = hf_trained(BUILTIN, pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=600)
    directory.mkdir()
    hf.model.save(str(directory))
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    vocab = {token: i - 2 for token, i in vocab.items() if i >= 2}  # its special tokens were first
    vocab["<|endoftext|>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return (directory / "merges.txt").read_text(encoding="utf-8").splitlines()[1:]


def test_a_gpt2_directory_whose_merges_were_cut_is_refused_naming_the_token(tmp_path):
    merges = gpt2_style_directory(tmp_path / "gpt2")
    whole = Tokenizer.load(tmp_path / "gpt2")
    assert whole.special_tokens == {"<|endoftext|>": len(whole) - 1}  # the full files load
    cut = len(merges) - 75
    (tmp_path / "gpt2" / "merges.txt").write_text("\n".join(["#version: 0.2", *merges[:cut]]) + "\n", encoding="utf-8")
    first_lost = merges[cut].replace(" ", "")  # the token the first missing merge makes
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(tmp_path / "gpt2")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'gpt2' / 'vocab.json'}: token {first_lost!r} (id ")
    assert "made by no merge" in message
    done = subprocess.run(
        [BPE, "encode", str(tmp_path / "gpt2"), "--text", "hello world"], capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.startswith(f"bpe: error: {tmp_path / 'gpt2' / 'vocab.json'}: token ")


@pytest.fixture(scope="module")
def gpt2_files() -> Path:
    if not (GPT2 / "vocab.json").exists() or not (GPT2 / "merges.txt").exists():
        pytest.skip(f"GPT-2 files not found at {GPT2}")
    return GPT2


@pytest.fixture(scope="module")
def gpt2_tiktoken(gpt2_files, tmp_path_factory) -> tiktoken.Encoding:
    """tiktoken's `gpt2` encoding, built as tiktoken builds it, from the same files read by
    tiktoken's own loader (the network copy is not reachable here; vocab.json is the same file,
    checked by the SHA-256 tiktoken pins for encoder.json). tiktoken skips the first line of the
    merges file, the `#version` header, which the shared copy lacks: it reads a copy with one."""
    merges = gpt2_files / "merges.txt"
    text = merges.read_text(encoding="utf-8")
    if not text.startswith("#version"):
        merges = tmp_path_factory.mktemp("gpt2-merges") / "vocab.bpe"
        merges.write_text("#version: 0.2\n" + text, encoding="utf-8")
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the files, cache nothing
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(
            str(merges),
            str(gpt2_files / "vocab.json"),
            encoder_json_hash="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        )
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous
    return tiktoken.Encoding(
        "gpt2",
        pat_str=R50K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
        explicit_n_vocab=50257,
    )


@pytest.fixture(scope="module")
def gpt2_forms(gpt2_files, gpt2_tiktoken, tmp_path_factory) -> dict[str, Tokenizer]:
    """GPT-2 loaded from each form others ship it in."""
    hf = HFTokenizer(models.BPE.from_file(str(gpt2_files / "vocab.json"), str(gpt2_files / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>"])
    hf_dir = tmp_path_factory.mktemp("gpt2-hf")
    hf.save(str(hf_dir / HF_FILE))
    ranks_file = tmp_path_factory.mktemp("gpt2-tiktoken") / "gpt2.tiktoken"
    dump_ranks(gpt2_tiktoken._mergeable_ranks, ranks_file)
    return {
        "vocab.json + merges.txt": Tokenizer.load(gpt2_files),
        "tokenizer.json": Tokenizer.load(hf_dir / HF_FILE),
        ".tiktoken": Tokenizer.load(ranks_file, pattern="gpt2", special_tokens={"<|endoftext|>": 50256}),
        "tiktoken.Encoding": Tokenizer.from_tiktoken(gpt2_tiktoken),
    }


def test_gpt2_in_every_form_gives_tiktoken_and_hugging_face_ids(gpt2_forms, gpt2_tiktoken, gpt2_files, corpus_rows):
    hf = HFTokenizer(models.BPE.from_file(str(gpt2_files / "vocab.json"), str(gpt2_files / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rows = corpus_rows[:400] + TRICKY
    expected = gpt2_tiktoken.encode_ordinary_batch(rows)
    assert expected == [e.ids for e in hf.encode_batch(rows)]  # the two references agree
    for form, tok in gpt2_forms.items():
        assert tok.pattern == "gpt2" and tok.special_tokens == {"<|endoftext|>": 50256}, form
        assert (len(tok), tok.n_vocab, tok.eot_token) == (50257, gpt2_tiktoken.n_vocab, gpt2_tiktoken.eot_token), form
        assert tok.encode_ordinary_batch(rows) == expected, form
        text = "Hello<|endoftext|>"
        assert tok.encode(text, allowed_special="all") == gpt2_tiktoken.encode(text, allowed_special="all"), form
        assert tok.get_vocab() == json.loads((gpt2_files / "vocab.json").read_text()), form


@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_gpt2_in_every_form_gives_tiktoken_ids_on_any_text(gpt2_forms, gpt2_tiktoken, text):
    expected = gpt2_tiktoken.encode_ordinary(text)
    for form, tok in gpt2_forms.items():
        assert tok.encode_ordinary(text) == expected, form


def test_gpt2_to_tiktoken_is_tiktoken_gpt2(gpt2_forms, gpt2_tiktoken):
    for form, tok in gpt2_forms.items():
        encoding = tok.to_tiktoken("gpt2")
        assert encoding._mergeable_ranks == gpt2_tiktoken._mergeable_ranks, form
        assert encoding._special_tokens == gpt2_tiktoken._special_tokens, form
        assert encoding.encode(TRICKY[0]) == gpt2_tiktoken.encode(TRICKY[0])


@pytest.fixture(scope="module")
def ours_trained(tmp_path_factory) -> tuple[Tokenizer, Path]:
    tok = train(BUILTIN, vocab_size=800, pattern="cl100k", special_tokens=["<|endoftext|>", "<|pad|>"])
    out = tmp_path_factory.mktemp("ours") / "tok"
    tok.save(out)
    return tok, out


def test_a_tiktoken_ranks_file_loads_with_a_pattern(ours_trained):
    tok, out = ours_trained
    reference = independent_encoding(out, NAMED_PATTERNS["cl100k"], tok.special_tokens)
    loaded = Tokenizer.load(out / TIKTOKEN_FILE, pattern="cl100k", special_tokens=list(tok.special_tokens))
    assert loaded == tok and loaded.merges == tok.merges  # the merges come back from the ranks alone
    for text in BUILTIN[::5] + TRICKY + ["a<|pad|>b"]:
        assert loaded.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")


def test_a_tiktoken_ranks_file_without_a_pattern_is_refused_naming_it(ours_trained, tmp_path):
    _, out = ours_trained
    alone = tmp_path / "only-ranks"
    alone.mkdir()
    shutil.copy(out / TIKTOKEN_FILE, alone / "mine.tiktoken")
    for path in (out / TIKTOKEN_FILE, alone / "mine.tiktoken", alone):
        with pytest.raises(ExportError, match=r"\.tiktoken: a tiktoken ranks file records no split pattern"):
            Tokenizer.load(path)
    assert Tokenizer.load(alone, pattern="cl100k").encode("hello there") == ours_trained[0].encode("hello there")
    with pytest.raises(SettingsError, match="^pattern: "):
        Tokenizer.load(alone, pattern="(")


def test_ranks_that_are_not_bpe_are_refused(tmp_path):
    ranks = {bytes([b]): b for b in range(256)} | {b"abc": 256}  # no "ab" nor "bc" to merge from
    dump_ranks(ranks, tmp_path / "bad.tiktoken")
    with pytest.raises(ExportError, match=r"bad\.tiktoken: token b'abc' \(rank 256\) is not the merge of two"):
        Tokenizer.load(tmp_path / "bad.tiktoken", pattern="gpt2")


def test_to_and_from_tiktoken_round_trip(ours_trained):
    tok, out = ours_trained
    encoding = tok.to_tiktoken()
    reference = independent_encoding(out, NAMED_PATTERNS["cl100k"], tok.special_tokens)
    back = Tokenizer.from_tiktoken(encoding)
    assert back == tok and back.pattern == "cl100k"
    texts = BUILTIN[::3] + TRICKY
    assert encoding.encode_batch(texts, allowed_special="all") == reference.encode_batch(texts, allowed_special="all")
    assert back.encode_batch(texts, allowed_special="all") == reference.encode_batch(texts, allowed_special="all")


def test_from_tiktoken_keeps_the_roles_and_length_that_to_tiktoken_carried():
    eot = "<|endoftext|>"
    roles = {"eos": eot, "pad": "<|pad|>"}
    tok = train(
        BUILTIN[:300], vocab_size=500, special_tokens=[eot, "<|pad|>"], special_token_roles=roles, model_max_length=64
    )
    encoding = tok.to_tiktoken()
    back = Tokenizer.from_tiktoken(encoding)
    assert back == tok
    assert back.special_token_roles == roles and back.model_max_length == 64
    plain = Tokenizer.from_tiktoken(encoding, special_token_roles={}, model_max_length=None)
    assert plain.special_token_roles == {} and plain.model_max_length == 64  # None: keep what it carries
    bare = tiktoken.Encoding(
        "bare",
        pat_str=encoding._pat_str,
        mergeable_ranks=encoding._mergeable_ranks,
        special_tokens=encoding._special_tokens,
    )
    assert Tokenizer.from_tiktoken(bare, special_token_roles=roles, model_max_length=64) == tok


@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_to_tiktoken_gives_our_ids_on_any_text(ours_trained, text):
    tok, out = ours_trained
    expected = independent_encoding(out, NAMED_PATTERNS["cl100k"], {}).encode_ordinary(text)
    assert tok.to_tiktoken().encode_ordinary(text) == tok.encode_ordinary(text) == expected


def test_whitespace_pattern_survives_tiktoken_round_trip():
    tok = train(BUILTIN, vocab_size=500, pattern="whitespace")
    back = Tokenizer.from_tiktoken(tok.to_tiktoken())
    assert back == tok and back.pattern == "whitespace"
    for text in TRICKY:
        assert back.encode(text) == tok.encode(text)


def test_transformers_is_imported_only_by_tests():
    for path in Path(bpe.__file__).parent.rglob("*.py"):
        assert "import transformers" not in path.read_text(encoding="utf-8"), path
