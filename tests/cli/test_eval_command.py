"""`bpe eval TOKENIZER... --dev DIR`: our tokenizer, GPT-2's released files and a Hugging Face
tokenizer.json side by side in one table, a row per language; --json is `bpe.evaluate`'s figures;
--plot writes a PNG; what cannot be evaluated is one line and a non-zero exit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bpe import evaluate, train
from bpe.cli import main
from tests.conftest import GPT2, stdlib_paragraphs
from tests.test_tiers import PIPELINE_ONLY, bpe_without

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """A dev set of three languages (20 parallel sentences: English, the same upper-cased as `deu`,
    and with Greek letters as `ell`), our tokenizer, GPT-2's files (a trained stand-in in their
    format where the released ones are absent) and a tokenizer.json that Hugging Face trained."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("eval")
    texts = stdlib_paragraphs()
    sentences = [" ".join(t.split()[:12]) for t in texts[1000:1020]]
    dev = root / "dev"
    dev.mkdir()
    greek = str.maketrans("aeiou", "αεΙου")
    (dev / "eng.txt").write_text("\n".join(sentences) + "\n")
    (dev / "deu.txt").write_text("\n".join(s.upper() for s in sentences) + "\n")
    (dev / "ell.txt").write_text("\n".join(s.translate(greek) for s in sentences) + "\n")
    train(texts[:400], vocab_size=500, pattern="cl100k").save(root / "ours")
    if (GPT2 / "merges.txt").exists():
        shutil.copytree(GPT2, root / "gpt2", ignore=shutil.ignore_patterns("*.md"))
    else:
        train(texts[:400], vocab_size=700, pattern="gpt2").save(root / "stand-in")
        (root / "gpt2").mkdir()
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(root / "stand-in" / name, root / "gpt2" / name)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(texts[400:800], trainer)
    (root / "hf").mkdir()
    hf.save(str(root / "hf" / "tokenizer.json"))
    return {"root": root, "dev": dev, "tokenizers": [root / "ours", root / "gpt2", root / "hf" / "tokenizer.json"]}


def bpe(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_shows_ours_gpt2s_files_and_a_tokenizer_json_side_by_side(made, capsys):
    code, out, err = bpe(capsys, "eval", *made["tokenizers"], "--dev", made["dev"])
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0] == f"dev set {made['dev']}: 3 language(s), 20 parallel sentence(s) each"
    names = lines[2].split()
    assert names == ["ours", "gpt2", "hf/tokenizer.json"]
    assert lines[3].split() == ["language", *["bytes/tok", "tok/sent", "fertility", "parity"] * 3]
    rows = {line.split()[0]: line.split()[1:] for line in lines[4:7]}
    assert list(rows) == ["deu", "ell", "eng"]  # code order
    expected = evaluate(made["tokenizers"], made["dev"])
    for i, found in enumerate(expected.tokenizers):
        for code_, figures in found.languages.items():
            shown = rows[code_][4 * i : 4 * i + 4]
            wanted = [figures.bytes_per_token, figures.tokens_per_sentence, figures.fertility, figures.parity]
            assert shown == [f"{wanted[0]:.2f}", f"{wanted[1]:.1f}", f"{wanted[2]:.2f}", f"{wanted[3]:.2f}"]
        assert rows["eng"][4 * i + 3] == "1.00"
    gini = next(line for line in lines if line.startswith("Gini"))
    assert gini.split()[1:] == [f"{t.gini:.4f}" for t in expected.tokenizers]
    assert any(line.startswith("Renyi eff. (2.5)") for line in lines)
    assert any(line.startswith("vocab used") for line in lines)


def test_json_is_the_evaluation_of_bpe_evaluate_and_the_plot_a_png(made, capsys, tmp_path):
    plot = tmp_path / "figures" / "languages.png"
    args = ["--dev", made["dev"], "--lang", "eng,ell", "--name", "a", "--name", "b", "--pivot", "ell"]
    code, out, err = bpe(capsys, "eval", *made["tokenizers"][:2], *args, "--json", "--plot", plot)
    assert code == 0 and err == "", err
    found = json.loads(out)
    expected = evaluate(dict(zip("ab", made["tokenizers"])), made["dev"], "ell", languages=["eng", "ell"])
    assert found == json.loads(json.dumps(expected.to_json()))
    assert found["pivot"] == "ell" and found["dev"]["languages"] == ["ell", "eng"]
    assert [t["name"] for t in found["tokenizers"]] == ["a", "b"]
    assert set(found["tokenizers"][0]) >= {"languages", "gini", "renyi_efficiency", "vocabulary_use", "bytes_per_token"}
    assert set(found["tokenizers"][0]["languages"]["eng"]) == {
        "sentences",
        "bytes",
        "tokens",
        "words",
        "bytes_per_token",
        "tokens_per_sentence",
        "fertility",
        "parity",
        "vocabulary_use",
        "renyi_efficiency",
    }
    assert plot.read_bytes()[:8] == PNG


def test_a_tiktoken_file_is_read_with_the_pattern_given_to_it_alone(made, capsys, tmp_path):
    """--pattern is the split pattern of the .tiktoken file, which records none; our directory
    beside it keeps its own (a pattern given to it would replace it)."""
    shutil.copy(made["root"] / "ours" / "tokenizer.tiktoken", tmp_path / "ours.tiktoken")
    code, out, err = bpe(capsys, "eval", tmp_path / "ours.tiktoken", made["root"] / "ours", "--dev", made["dev"])
    assert code == 1 and "a tiktoken ranks file records no split pattern" in err
    both = [tmp_path / "ours.tiktoken", made["root"] / "ours", "--dev", made["dev"], "--json"]
    code, out, err = bpe(capsys, "eval", *both, "--pattern", "whitespace")
    assert code == 0, err
    first, second = json.loads(out)["tokenizers"]
    assert first["name"] == "ours.tiktoken"
    assert first["languages"] != second["languages"]  # the ranks split at spaces, the directory as cl100k
    code, out, err = bpe(capsys, "eval", *both, "--pattern", "cl100k")
    first, second = json.loads(out)["tokenizers"]
    assert first["languages"] == second["languages"]  # the same tokenizer, read from its ranks


def one_line_error(capsys, *args) -> str:
    code, out, err = bpe(capsys, "eval", *args)
    assert code == 1 and out == "" and err.startswith("bpe: error: ") and err.count("\n") == 1, (code, out, err)
    return err.removeprefix("bpe: error: ").rstrip("\n")


def test_what_cannot_be_evaluated_is_one_line(made, capsys, tmp_path):
    ours, dev = made["root"] / "ours", made["dev"]
    uneven = tmp_path / "uneven"
    shutil.copytree(dev, uneven)
    (uneven / "ell.txt").write_text("one sentence\n")
    assert one_line_error(capsys, ours, "--dev", uneven).startswith(
        f"{uneven}/ell.txt has 1 line but {uneven}/deu.txt has 20: a parallel dev set holds the same sentences"
    )
    assert one_line_error(capsys, ours, "--dev", dev, "--pivot", "hin") == (
        "--pivot: 'hin' is not a language of the dev set (it has deu, ell, eng)"
    )
    assert one_line_error(capsys, ours, "--dev", dev, "--lang", "eng,tel") == (
        f"--lang: 'tel' is not in the dev set {dev} (it has deu, ell, eng)"
    )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text('{"model": ')
    assert one_line_error(capsys, tmp_path / "broken", "--dev", dev).startswith(
        f"{tmp_path}/broken/tokenizer.json: not valid JSON"
    )
    assert one_line_error(capsys, tmp_path / "nothing", "--dev", dev).startswith(
        f"{tmp_path}/nothing: holds no tokenizer"
    )
    assert one_line_error(capsys, ours, ours, "--dev", dev, "--name", "x") == (
        "--name: given 1 time(s) for 2 tokenizer(s): give one name per TOKENIZER, in their order"
    )
    assert one_line_error(capsys, ours, ours, "--dev", dev, "--name", "x", "--name", "x") == (
        "--name: 'x' names two tokenizers; give each its own name"
    )
    assert one_line_error(capsys, ours, "--dev", dev, "--threads", "0").startswith(
        "--threads: expected an integer >= 1"
    )
    assert one_line_error(capsys, ours, "--dev", tmp_path / "no-dev") == (
        f"{tmp_path}/no-dev: no such directory (a dev set is a directory of <code>.txt or <code>.parquet files)"
    )


def test_eval_runs_without_matplotlib_and_plot_names_the_extra(made, tmp_path):
    args = ["eval", str(made["root"] / "ours"), "--dev", str(made["dev"])]
    done = bpe_without(PIPELINE_ONLY, *args, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("dev set "), done.stderr[-2000:]
    done = bpe_without(PIPELINE_ONLY, *args, "--plot", "p.png", cwd=tmp_path)
    assert done.returncode == 1 and not Path(tmp_path / "p.png").exists()
    assert done.stderr.startswith("bpe: error: bpe eval --plot needs the [plot] extra (matplotlib is not installed)")
    assert done.stderr.count("\n") == 1


def test_a_plot_that_cannot_be_written_is_refused_before_the_evaluation(made, capsys, tmp_path):
    """--plot is checked first, in one line naming it and the path as given: a suffix matplotlib
    does not write, a directory, a place under a file; a good suffix other than .png is its format."""
    ours, dev = made["root"] / "ours", made["dev"]
    (tmp_path / "file").write_text("")
    for plot, why in [
        (tmp_path / "figure.xyz", "expected a file ending in a format matplotlib writes ("),
        (tmp_path / "figure", "expected a file ending in a format matplotlib writes"),
        (tmp_path, "is a directory"),
        (tmp_path / "file" / "figure.png", f"{tmp_path}/file is a file, not a directory"),
    ]:
        assert one_line_error(capsys, ours, "--dev", dev, "--plot", plot).startswith(f"--plot: {plot}: {why}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    code, out, err = bpe(capsys, "eval", ours, "--dev", dev, "--plot", tmp_path / "figure.svg")
    assert code == 0 and (tmp_path / "figure.svg").read_text().lstrip().startswith("<?xml"), err


def test_a_url_that_cannot_be_read_is_one_line_naming_it(made, capsys, tmp_path, monkeypatch):
    """A tokenizer or a dev set at a URL nothing answers, or in a store without credentials: one
    line naming the URL, as `bpe encode` says it, rather than the HTTP or S3 library's traceback."""
    pytest.importorskip("s3fs")
    from tests.conftest import drop_s3_credentials

    closed = "http://127.0.0.1:9"  # nothing listens on the discard port
    ours, dev = made["root"] / "ours", made["dev"]
    for args, url in [((f"{closed}/tok/", "--dev", dev), f"{closed}/tok/"), ((ours, "--dev", f"{closed}/dev/"), None)]:
        url = url or f"{closed}/dev/"
        assert one_line_error(capsys, *args).startswith(f"{url}: cannot read it (ClientConnectorError: ")
    drop_s3_credentials(monkeypatch, tmp_path)
    assert one_line_error(capsys, ours, "--dev", "s3://no-credentials/dev/") == (
        "s3://no-credentials/dev/: cannot read it (NoCredentialsError: Unable to locate credentials)"
    )
