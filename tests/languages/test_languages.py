"""Text by language through every surface: `train(files={...})` and `texts={...}`, `bpe train
--lang`, what each language's record in the manifest says, and what is refused (an ill-formed
code, a language given twice or with no text, `--lang` without `=`, a mixture or parity settings
without languages, a dev set or ratios that do not match the languages), in one line naming the
setting as the caller spelt it, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bpe import Tokenizer
from bpe.cli import main
from bpe.errors import InputError, SettingsError
from bpe.manifest import Manifest
from bpe.training.counting import count_words
from bpe.training.trainer import train
from tests.conftest import SHARED, write_parquet

ENG = ["the cat sat on the mat", "the dog sat on the log", "low lower lowest, newer newest"] * 4
HIN = ["नमस्ते दुनिया", "दुनिया नमस्ते नमस्ते", "हिन्दी भाषा"] * 3
ELL = ["καλημέρα κόσμε", "ο κόσμος είναι μεγάλος"] * 3
TEXTS = {"hin": HIN, "eng": ENG, "ell": ELL}  # not in the order of their codes: ell, eng, hin


def run(*args) -> int:
    return main([str(a) for a in args])


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bpe: error: "), err
    return err[0].removeprefix("bpe: error: ")


@pytest.fixture
def corpus(tmp_path) -> dict[str, Path]:
    """Each language's text as files: English in two text files, Hindi in Parquet, Greek as lines."""
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "a.txt").write_text("\n".join(ENG[:6]), encoding="utf-8")
    (tmp_path / "en" / "b.txt").write_text("\n".join(ENG[6:]), encoding="utf-8")
    write_parquet(tmp_path / "hi" / "part-0.parquet", HIN)
    (tmp_path / "el.txt").write_text("\n".join(ELL), encoding="utf-8")
    return {"eng": tmp_path / "en", "hin": tmp_path / "hi", "ell": tmp_path / "el.txt"}


def test_files_by_language_train_as_their_union_without_a_mixture(corpus):
    """Plain BPE on text by language is plain BPE on all of it: the same merges as the files given
    as one input, and the same totals; each file is recorded with its language."""
    by_language = train(files={code: str(path) for code, path in corpus.items()}, vocab_size=330, pattern="gpt2")
    union = train(files=[str(path) for path in corpus.values()], vocab_size=330, pattern="gpt2")
    assert by_language.merges == union.merges and len(by_language.merges) == 330 - 256
    assert by_language.manifest.counts.to_json() == union.manifest.counts.to_json()
    languages = {Path(s["path"]).name: s["language"] for s in by_language.manifest.data.shards}
    assert languages == {"a.txt": "eng", "b.txt": "eng", "part-0.parquet": "hin", "el.txt": "ell"}
    assert by_language.manifest.data.fingerprint != union.manifest.data.fingerprint  # which language a file is


def test_texts_by_language_are_counted_apart_and_held_in_the_order_of_their_codes():
    tok = train(texts=TEXTS, vocab_size=320, pattern="gpt2")
    again = train(texts=dict(reversed(TEXTS.items())), vocab_size=320, pattern="gpt2")
    assert tok.merges == again.merges == train([*ENG, *HIN, *ELL], vocab_size=320, pattern="gpt2").merges
    record = tok.manifest.languages
    assert record.codes == ["ell", "eng", "hin"] and list(record.by_language) == record.codes
    total = sum(len(t.encode()) for texts in TEXTS.values() for t in texts)
    for code, texts in TEXTS.items():
        words = count_words(texts, "gpt2")
        entry = record.by_language[code]
        assert entry == {
            "documents": len(texts),
            "bytes": sum(len(t.encode()) for t in texts),
            "words": words.total,
            "unique_words": len(words),
            "share": round(entry["bytes"] / total, 6),
            "multiplier": 1,
            "weighted_share": round(entry["bytes"] / total, 6),
        }
    assert record.mix is None and record.parity is None
    assert again.manifest.languages.to_json() == record.to_json()


def test_the_languages_record_is_saved_loaded_and_cut_and_an_older_manifest_loads_without_one(tmp_path):
    tok = train(texts=TEXTS, mix="eng=1,hin=4", vocab_size=320, pattern="gpt2")
    tok.save(tmp_path / "tok")
    loaded = Tokenizer.load(tmp_path / "tok").manifest.languages
    assert loaded.to_json() == tok.manifest.languages.to_json()
    assert loaded.mix == {"given": "eng=1,hin=4", "weights": {"eng": 1, "hin": 4}}
    assert [loaded.by_language[c]["multiplier"] for c in loaded.codes] == [1, 1, 4]
    assert sum(loaded.by_language[c]["weighted_share"] for c in loaded.codes) == pytest.approx(1, abs=1e-5)
    assert tok.truncated(300).manifest.languages.to_json() == loaded.to_json()
    older = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    del older["languages"]
    assert Manifest.from_json(older).languages is None and "languages" not in Manifest.from_json(older).to_json()


def test_a_limit_applies_to_each_language(corpus):
    files = {code: str(path) for code, path in corpus.items()}
    tok = train(files=files, vocab_size=300, limit="2rows", text_format="lines")
    documents = {code: entry["documents"] for code, entry in tok.manifest.languages.by_language.items()}
    assert documents == {"ell": 2, "eng": 2, "hin": 2}


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"files": {"Eng": ["x"]}}, SettingsError, "files: 'Eng' is not a language code"),
        ({"files": {"eng": []}}, SettingsError, "files: eng: no inputs given"),
        ({"files": {}}, SettingsError, "files: expected at least one language"),
        ({"texts": {"eng": ENG, "hin": ["", None]}}, InputError, "hin: no text to train on in its texts"),
        ({"texts": ENG, "mix": "temperature=0.3"}, SettingsError, "mix: needs text by language (files={code: ...}"),
        ({"texts": ENG, "parity": True}, SettingsError, "parity: needs text by language"),
        ({"texts": TEXTS, "global_merges": 10}, SettingsError, "global_merges: only parity-aware merges use it"),
        ({"texts": TEXTS, "parity_window": 10}, SettingsError, "parity_window: only parity-aware merges use it"),
        ({"texts": TEXTS, "parity_ratio": "eng=1,hin=2"}, SettingsError, "parity_ratio: every language needs a ratio"),
        ({"texts": TEXTS, "parity_ratio": "eng=1,hin=2,ell=1,fra=1"}, SettingsError, "parity_ratio: fra is not one"),
        ({"texts": TEXTS, "parity_ratio": "eng=1,hin=0,ell=1"}, SettingsError, "parity_ratio: expected a positive"),
        ({"texts": TEXTS, "parity": True, "superwords": True, "transition": 280}, SettingsError, "parity: parity-"),
        ({"texts": TEXTS, "parity_variant": "best"}, SettingsError, "parity_variant: expected one of base, window"),
    ],
)
def test_train_refuses_in_one_line_naming_the_parameter(given, error, message):
    with pytest.raises(error) as caught:
        train(vocab_size=300, **given)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_a_dev_set_must_hold_the_runs_languages(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "README.md").write_text("not a language's file")
    for code in ("eng", "hin"):
        (dev / f"{code}.txt").write_text("the cat\nनमस्ते\n", encoding="utf-8")
    missing = r"^parity_dev: .*/dev/ell.txt: no dev text for ell \(.txt or .parquet; the dev set has eng, hin\)$"
    with pytest.raises(SettingsError, match=missing):
        train(texts=TEXTS, parity_dev=str(dev), vocab_size=300)
    (dev / "ell.txt").write_text("καλημέρα\nκόσμε\n", encoding="utf-8")
    write_parquet(dev / "eng.parquet", ["the cat"])
    with pytest.raises(
        SettingsError, match="^parity_dev: .*: both eng.txt and eng.parquet: keep one file per language$"
    ):
        train(texts=TEXTS, parity_dev=str(dev), vocab_size=300)
    (dev / "eng.parquet").unlink()
    with pytest.raises(SettingsError, match=r"^parity_ratio: replaces the dev set"):
        train(texts=TEXTS, parity_dev=str(dev), parity_ratio="eng=1,hin=1,ell=1", vocab_size=300)
    with pytest.raises(SettingsError, match=r"^parity_dev: .*/nowhere: no such directory \(a dev set is a directory"):
        train(texts=TEXTS, parity_dev=str(tmp_path / "nowhere"), vocab_size=300)


def test_a_dev_set_of_more_languages_gives_the_runs_and_says_which(tmp_path, capsys):
    """A multi-parallel set ships many languages in one folder: the run uses its own from it (the
    same merges as a folder of those alone) and the manifest and summary say which it used."""
    dev, alone = tmp_path / "dev", tmp_path / "alone"
    lines = {"eng": "the cat\nthe mat\n", "hin": "नमस्ते\nदुनिया\n", "ell": "καλημέρα\nκόσμε\n"}
    lines |= {"fra": "le chat\nle tapis\n", "deu": "die Katze\ndie Matte\n"}
    for folder, codes in ((dev, lines), (alone, ("ell", "eng", "hin"))):
        folder.mkdir()
        for code in codes:
            (folder / f"{code}.txt").write_text(lines[code], encoding="utf-8")
    tok = train(texts=TEXTS, parity_dev=str(dev), vocab_size=300)
    assert tok.merges == train(texts=TEXTS, parity_dev=str(alone), vocab_size=300).merges
    record = tok.manifest.languages.parity["dev"]
    assert record["languages"] == ["ell", "eng", "hin"] and sorted(record["files"]) == ["ell", "eng", "hin"]
    assert record["available"] == ["deu", "ell", "eng", "fra", "hin"]
    langs = [arg for code in TEXTS for arg in ("--lang", f"{code}={tmp_path / code}.txt")]
    for code, texts in TEXTS.items():
        (tmp_path / f"{code}.txt").write_text("\n".join(texts), encoding="utf-8")
    out = tmp_path / "tok"
    assert run("train", *langs, "--text-format", "lines", "--parity-dev", dev, "--vocab-size", 300, "--out", out) == 0
    assert f"parity base by dev {dev} (ell, eng, hin of 5 languages)" in capsys.readouterr().out


def test_a_dev_set_whose_languages_differ_in_lines_is_refused(tmp_path, capsys):
    """Line i of every file is the same sentence: files of unequal lengths are misaligned, and
    parity would weigh the languages wrongly; refused in one line naming both files."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "eng.txt").write_text("the cat\n", encoding="utf-8")
    (dev / "hin.txt").write_text("नमस्ते\nदुनिया\nनमस्ते\n", encoding="utf-8")
    (dev / "ell.txt").write_text("καλημέρα\nκόσμε\nκόσμε\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{dev}/eng.txt has 1 line but {dev}/ell.txt has 3: a parallel dev set"):
        train(texts=TEXTS, parity_dev=str(dev), vocab_size=300)
    for code, texts in TEXTS.items():
        (tmp_path / f"{code}.txt").write_text("\n".join(texts), encoding="utf-8")
    langs = [arg for code in TEXTS for arg in ("--lang", f"{code}={tmp_path / code}.txt")]
    assert run("train", *langs, "--parity-dev", dev, "--vocab-size", 300, "--out", tmp_path / "tok") == 1
    assert error_line(capsys).startswith(f"{dev}/eng.txt has 1 line but {dev}/ell.txt has 3")
    assert not (tmp_path / "tok").exists()


# -- bpe train --lang ---------------------------------------------------------------------------


def test_the_command_trains_on_text_by_language_as_train_does(corpus, tmp_path, capsys):
    out = tmp_path / "tok"
    args = ["--lang", f"hin={corpus['hin']}/*.parquet", "--lang", f"eng={corpus['eng']}", "--lang"]
    assert run("train", *args, f"ell={corpus['ell']}", "--mix", "hin=3", "--vocab-size", 320, "--out", out) == 0
    printed = capsys.readouterr().out
    assert "  languages ell " in printed and "hin " in printed and " (x3)" in printed and "mix hin=3" in printed
    files = {code: str(path) for code, path in corpus.items()}
    assert Tokenizer.load(out).merges == train(files=files, mix="hin=3", vocab_size=320).merges
    assert run("train", *args, f"ell={corpus['ell']}", "--vocab-size", 300, "--out", tmp_path / "j", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["languages"]["codes"] == ["ell", "eng", "hin"] and record["files"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lang", "eng"], "--lang: expected CODE=INPUT (eng=data/en/), got 'eng'"),
        (["--lang", "eng="], "--lang: expected CODE=INPUT"),
        (["--lang", "eng={en}", "--lang", "eng={hi}"], "--lang: eng is given twice"),
        (["--lang", "Eng={en}"], "--lang: 'Eng' is not a language code"),
        (["--lang", "eng={empty}"], "{empty}: directory holds no file to read"),
        (["--lang", "eng={en}", "{hi}"], "--lang: give the text by language or as INPUT, not both"),
        ([], "give INPUT (files, directories, globs, URLs or -), --lang CODE=INPUT, --lang-dir DIR or --counts DIR"),
        (["--lang-dir", "{langs}", "--lang", "eng={en}"], "--lang-dir: gives the text by language; give it, --lang or"),
        (["--lang-dir", "{langs}", "{en}"], "--lang-dir: gives the text by language; give it, --lang or INPUT, one"),
        (["--lang-dir", "{empty}"], "--lang-dir: {empty}: holds no file or folder named by a language code"),
        (["--lang-dir", "{en}/a.txt"], "--lang-dir: {en}/a.txt: not a directory"),
        (["{en}", "--mix", "temperature=0.3"], "--mix: needs text by language (--lang CODE=INPUT)"),
        (["{en}", "--parity-dev", "{en}"], "--parity-dev: needs text by language (--lang CODE=INPUT)"),
        (["--lang", "eng={en}", "--mix", "temperature=2"], "--mix: expected temperature=A with A from 0 to 1"),
        (["--lang", "eng={en}", "--mix", "fra=2"], "--mix: fra is not one of the run's languages (eng)"),
        (["--lang", "eng={en}", "--global-merges", "5"], "--global-merges: only parity-aware merges use it (turned on"),
        (["--lang", "eng={en}", "--lang", "hin={hi}", "--parity-ratio", "eng=1"], "--parity-ratio: every language"),
        (["--lang", "ell={en}", "--parity-dev", "{dev}"], "--parity-dev: {dev}/ell.txt: no dev text for ell"),
        (["--lang", "eng={en}", "--parity", "--superwords", "--transition", "280"], "--parity: parity-aware merges"),
        (["--lang", "eng={en}", "--parity-alpha", "0"], "--parity-alpha: expected a number above 0, got 0.0"),
    ],
)
def test_the_command_refuses_in_one_line_naming_the_flag_and_writes_nothing(corpus, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "dev").mkdir()
    for code in ("eng", "hin"):
        (tmp_path / "dev" / f"{code}.txt").write_text("the cat\n")
    (tmp_path / "langs").mkdir()
    (tmp_path / "langs" / "eng.txt").write_text("the cat\n")
    where = {"en": corpus["eng"], "hi": corpus["hin"], "empty": tmp_path / "empty", "dev": tmp_path / "dev"}
    where["langs"] = tmp_path / "langs"
    out = tmp_path / "tok"
    assert run("train", *[a.format(**where) for a in args], "--vocab-size", 300, "--out", out) == 1
    assert error_line(capsys).startswith(message.format(**where))
    assert not out.exists()


def test_train_help_shows_the_language_options_in_a_group_of_their_own_with_examples():
    from bpe.cli import build_parser, commands

    help = dict(commands(build_parser()))["bpe train"].format_help()
    group = help.split("\nlanguages:\n", 1)[1].split("\n\n", 2)[1]  # its description, then its options
    for flag in ("--lang", "--mix", "--parity ", "--parity-dev", "--parity-ratio", "--global-merges"):
        assert flag in group, flag
    assert "--parity-variant {base,window}" in group and "--parity-window" in group and "--parity-alpha" in group
    assert "bpe train --lang eng=" in help.split("examples:", 1)[1]


def test_many_small_languages_measure_the_cores_once(tmp_path, monkeypatch):
    """Counting a language at a time asks how busy the cores are once for the whole counting phase,
    not once per language: each measurement takes 50 ms, and 2,000 small languages took minutes."""
    from bpe.engine import cores

    measured = []
    busy_ticks = cores._busy_ticks
    monkeypatch.setattr(cores, "_busy_ticks", lambda *a: measured.append(1) or busy_ticks(*a))
    files = {}
    for i in range(30):
        code = f"l{i:02d}"
        (tmp_path / f"{code}.txt").write_text("\n".join(ENG[i % 3 :: 3]), encoding="utf-8")
        files[code] = str(tmp_path / f"{code}.txt")
    train(files=files, vocab_size=270, pattern="gpt2")
    assert len(measured) // 2 <= 2  # two readings a measurement; counting once, the merge loop once at most


def test_a_dev_set_url_that_cannot_be_read_is_one_line(tmp_path, capsys):
    for code, texts in TEXTS.items():
        (tmp_path / f"{code}.txt").write_text("\n".join(texts), encoding="utf-8")
    langs = [arg for code in TEXTS for arg in ("--lang", f"{code}={tmp_path / code}.txt")]
    dev = "http://127.0.0.1:9/dev/"  # nothing listens on the discard port
    assert run("train", *langs, "--parity-dev", dev, "--vocab-size", 300, "--out", tmp_path / "tok") == 1
    assert error_line(capsys).startswith(f"{dev}: cannot read it (ClientConnectorError: ")
    assert not (tmp_path / "tok").exists()


# -- a directory of languages: --lang-dir, lang_dir= -------------------------------------------------


def test_a_directory_of_languages_trains_as_a_flag_per_language_does(corpus, tmp_path, capsys):
    """`--lang-dir DIR` (`lang_dir=`): an entry per language, a file `<code>.<ext>` or a folder
    `<code>/`, named by its code; other names (README.md, hidden files) are not languages."""
    langs = tmp_path / "langs"
    langs.mkdir()
    (langs / "README.md").write_text("eng: English; hin: Hindi")
    (langs / ".ell.txt.swp").write_text("not a language's file")
    (langs / "ell.txt").write_text((corpus["ell"]).read_text(encoding="utf-8"), encoding="utf-8")
    (langs / "eng").symlink_to(corpus["eng"])
    write_parquet(langs / "hin.parquet", HIN)
    files = {code: str(path) for code, path in corpus.items()}
    expected = train(files=files, mix="hin=3", vocab_size=320)
    tok = train(lang_dir=str(langs), mix="hin=3", vocab_size=320)
    assert tok.merges == expected.merges and tok.manifest.languages.codes == ["ell", "eng", "hin"]
    out = tmp_path / "tok"
    assert run("train", "--lang-dir", langs, "--mix", "hin=3", "--vocab-size", 320, "--out", out) == 0
    assert "  languages ell " in capsys.readouterr().out
    assert Tokenizer.load(out).merges == expected.merges
    with pytest.raises(SettingsError, match="^lang_dir: gives the text by language; give it or files, not both$"):
        train(lang_dir=str(langs), files=files, vocab_size=320)
    (langs / "eng.txt").write_text("the cat")
    with pytest.raises(SettingsError, match=f"^lang_dir: {langs}: both eng and eng.txt are eng's: keep one entry"):
        train(lang_dir=str(langs), vocab_size=320)


UD = SHARED / "corpora" / "ud"


@pytest.mark.skipif(not UD.is_dir(), reason="the shared UD corpora are not here")
def test_the_shared_ud_corpora_are_a_directory_of_languages(tmp_path, capsys):
    """The 18 UD languages, one Parquet file each, in one flag rather than 18."""
    out = tmp_path / "ud"
    assert run("train", "--lang-dir", UD, "--limit", "200rows", "--vocab-size", 400, "--out", out, "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["languages"]["codes"] == sorted(p.name.split(".")[0] for p in UD.glob("*.parquet"))
    assert len(record["languages"]["codes"]) >= 18
