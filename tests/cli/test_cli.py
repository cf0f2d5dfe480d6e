"""The `bpe` command: inputs of every kind, the outputs, and a clear one-line error for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex

from bpe import Tokenizer
from bpe.cli import main
from bpe.formats.manifest_json import TOKENIZER_FILES
from bpe.pretokenize import NAMED_PATTERNS
from tests.conftest import write_parquet
from tests.reference import train_reference

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "cats and dogs, 1234 of them!", "naïve café 中文"] * 5


def run(*args: str) -> int:
    return main([str(a) for a in args])


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bpe: error: "), err
    return err[0]


@pytest.fixture
def shards(tmp_path) -> Path:
    data = tmp_path / "data"
    write_parquet(data / "a.parquet", TEXTS[:10])
    write_parquet(data / "b.parquet", TEXTS[10:] + [None])
    return data


def test_train_writes_every_format_and_a_manifest(shards, tmp_path, capsys):
    out = tmp_path / "tok"
    assert run("train", shards, "--vocab-size", 300, "--special-token", "<|endoftext|>", "--out", out) == 0
    printed = capsys.readouterr().out
    assert "merges" in printed and "bytes per token" in printed and "1 null rows skipped" in printed
    assert sorted(p.name for p in out.iterdir()) == sorted(TOKENIZER_FILES)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == len(TEXTS) and manifest["counts"]["null_rows"] == 1
    assert manifest["counts"]["bytes"] == sum(len(t.encode()) for t in TEXTS)
    assert [s["path"] for s in manifest["data"]["shards"]] == [str(shards / "a.parquet"), str(shards / "b.parquet")]
    assert all(len(s["sha256"]) == 64 and s["size"] > 0 for s in manifest["data"]["shards"])
    assert manifest["settings"]["pattern"] == "cl100k" and manifest["settings"]["special_tokens"] == ["<|endoftext|>"]
    assert set(manifest["seconds"]) >= {"count", "merge", "export", "total"}
    assert "numpy" in manifest["versions"]
    tok = Tokenizer.load(out)
    words = Counter(p.encode() for t in TEXTS for p in regex.findall(NAMED_PATTERNS["cl100k"], t))
    assert tok.merges == train_reference(dict(words), 300 - 256 - 1)
    n = len(tok.merges)
    assert tok.special_tokens == {"<|endoftext|>": 256 + n} and tok.vocab_size == 257 + n
    assert manifest["result"]["merges"] == n and manifest["result"]["vocab_size"] == 257 + n


def test_txt_jsonl_globs_and_file_urls_count_the_same(tmp_path, capsys):
    data = tmp_path / "mixed"
    data.mkdir()
    (data / "one.txt").write_text(TEXTS[0])
    (data / "two.txt").write_text(TEXTS[1])
    (data / "rest.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS[2:])))
    write_parquet(tmp_path / "all.parquet", TEXTS)
    run("train", tmp_path / "all.parquet", "--vocab-size", 290, "--out", tmp_path / "p", "--quiet")
    run("train", f"{data}/*.txt", f"file://{data}/rest.jsonl", "--vocab-size", 290, "--out", tmp_path / "m", "--quiet")
    assert Tokenizer.load(tmp_path / "p").merges == Tokenizer.load(tmp_path / "m").merges


@pytest.mark.services
def test_encode_and_decode_of_a_tokenizer_url_that_cannot_be_read_is_one_line(tmp_path, capsys, s3_env, monkeypatch):
    """Without credentials for the store, `bpe encode s3://...` and `bpe decode` say so in one line."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from bpe import train
    from tests.conftest import drop_s3_credentials, unique_bucket

    bucket = unique_bucket("bpe-cli")
    boto3.client("s3").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/tok/"
    tok = train(["the cat sat on the mat"] * 20, vocab_size=265)
    tok.save(url)
    assert run("encode", url, "--text", "the cat") == 0  # with credentials
    assert [int(i) for i in capsys.readouterr().out.split()] == tok.encode("the cat")
    drop_s3_credentials(monkeypatch, tmp_path)
    for argv in (["encode", url, "--text", "the cat"], ["decode", url, "256"]):
        assert run(*argv) == 1
        out, err = capsys.readouterr()
        assert (
            out == ""
            and err == f"bpe: error: {url}: cannot read it (NoCredentialsError: Unable to locate credentials)\n"
        )


def test_the_installed_command_runs(shards, tmp_path):
    out = tmp_path / "tok"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run(
        [sys.executable, "-m", "bpe.cli", "train", str(shards), "--vocab-size", "280", "--out", str(out)],
        check=True,
        env=env,
        capture_output=True,
    )
    encoded = subprocess.run(
        [sys.executable, "-m", "bpe.cli", "encode", str(out)],
        input="the dog\n",
        text=True,
        check=True,
        env=env,
        capture_output=True,
    ).stdout
    assert [int(i) for i in encoded.split()] == Tokenizer.load(out).encode("the dog")
    decoded = subprocess.run(
        [sys.executable, "-m", "bpe.cli", "decode", str(out), *encoded.split()],
        text=True,
        check=True,
        env=env,
        capture_output=True,
    ).stdout
    assert decoded == "the dog\n"


def test_the_command_leaves_its_output_whole_and_its_exit_code(shards, tmp_path):
    """A local command ends without the interpreter's teardown (`bpe.cli.run`): what it printed
    into a pipe, far past any buffer, must all arrive, and the exit code must be the command's."""
    bpe = str(Path(sys.executable).parent / "bpe")
    train = [bpe, "train", "--vocab-size", "280", "--out"]
    trained = subprocess.run([*train, str(tmp_path / "tok"), str(shards)], capture_output=True, text=True)
    assert trained.returncode == 0 and trained.stdout.startswith("trained ") and "  time " in trained.stdout
    text = " ".join(TEXTS) * 400
    encoded = subprocess.run([bpe, "encode", str(tmp_path / "tok")], input=text, capture_output=True, text=True)
    assert encoded.returncode == 0 and len(encoded.stdout) > 1 << 18
    assert [int(i) for i in encoded.stdout.split()] == Tokenizer.load(tmp_path / "tok").encode(text)
    failed = subprocess.run([*train, str(tmp_path / "x"), str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert failed.returncode == 1 and failed.stderr.startswith("bpe: error: ") and failed.stdout == ""


def test_train_quiet_prints_nothing(tmp_path):
    data = write_parquet(tmp_path / "d.parquet", ["the cat sat on the mat"] * 20)
    command = [str(Path(sys.executable).parent / "bpe"), "train", str(data), "--vocab-size", "262"]
    done = subprocess.run([*command, "--out", "tok", "--quiet"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and (done.stdout, done.stderr) == ("", "")
    assert Tokenizer.load(tmp_path / "tok").vocab_size == 262
    loud = subprocess.run([*command, "--out", "tok2"], cwd=tmp_path, capture_output=True, text=True)
    assert loud.returncode == 0 and "merges" in loud.stdout  # the summary, without --quiet


def test_existing_tokenizer_is_never_overwritten_without_force(shards, tmp_path, capsys):
    out = tmp_path / "tok"
    run("train", shards, "--vocab-size", 270, "--out", out, "--quiet")
    before = (out / "merges.txt").read_text()
    assert run("train", shards, "--vocab-size", 280, "--out", out, "--quiet") == 1
    assert "already holds a tokenizer" in error_line(capsys)
    assert (out / "merges.txt").read_text() == before
    assert run("train", shards, "--vocab-size", 280, "--out", out, "--force", "--quiet") == 0
    assert len((out / "merges.txt").read_text().splitlines()) == 1 + 280 - 256
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_force_replaces_the_tokenizer_and_keeps_every_other_file(shards, tmp_path):
    out = tmp_path / "tok"
    run("train", shards, "--vocab-size", 270, "--out", out, "--quiet")
    (out / "notes.txt").write_text("mine")
    (out / "data").mkdir()
    (out / "data" / "shard.parquet").write_bytes(b"not ours to delete")
    assert run("train", shards, "--vocab-size", 280, "--out", out, "--force", "--quiet") == 0
    assert len((out / "merges.txt").read_text().splitlines()) == 1 + 280 - 256
    assert json.loads((out / "manifest.json").read_text())["settings"]["vocab_size"] == 280
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "data" / "shard.parquet").read_bytes() == b"not ours to delete"
    assert not [p.name for p in [*tmp_path.iterdir(), *out.iterdir()] if p.name.startswith(".")]


def test_force_into_the_current_directory(shards, tmp_path, monkeypatch):
    out = tmp_path / "here"
    run("train", shards, "--vocab-size", 270, "--out", out, "--quiet")
    monkeypatch.chdir(out)
    assert run("train", shards, "--vocab-size", 280, "--out", ".", "--force", "--quiet") == 0
    assert len((out / "merges.txt").read_text().splitlines()) == 1 + 280 - 256
    assert not [p.name for p in [*tmp_path.iterdir(), *out.iterdir()] if p.name.startswith(".")]


def test_a_failed_export_leaves_nothing_behind(shards, tmp_path, capsys, monkeypatch):
    from bpe.errors import ExportError
    from bpe.formats import tiktoken_ranks

    def broken(*args, **kwargs):
        raise ExportError("disk full (simulated)")

    monkeypatch.setattr(tiktoken_ranks, "write", broken)
    assert run("train", shards, "--vocab-size", 280, "--out", tmp_path / "tok", "--quiet") == 1
    assert "disk full" in error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def file_with(name: str, content: bytes | str):
    def make(d: Path) -> Path:
        path = d / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return make


def parquet_with(name: str, table: pa.Table):
    def make(d: Path) -> Path:
        pq.write_table(table, d / name)
        return d / name

    return make


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.parquet", "missing.parquet: no such file or directory"),
        (file_with("fake.parquet", "not parquet"), "fake.parquet: not a readable Parquet file"),
        (parquet_with("other.parquet", pa.table({"body": ["x"]})), "other.parquet: no column 'text' (columns: body)"),
        (parquet_with("ints.parquet", pa.table({"text": [1, 2]})), "ints.parquet: column 'text' holds int64"),
        (file_with("bad.jsonl", b'{"text": "ok"}\n{"text": "\xc3("}\n'), "bad.jsonl: invalid UTF-8 at byte 25"),
        (file_with("json.jsonl", '{"text": "ok"}\n{"text": \n'), "json.jsonl:2: invalid JSON"),
        (file_with("nofield.jsonl", '{"body": "ok"}\n'), "nofield.jsonl:1: no field 'text'"),
        (file_with("logo.png", b"\x89PNG"), "logo.png: a .png file is not text"),  # any other suffix is text
    ],
)
def test_bad_input_gives_one_clear_line(tmp_path, capsys, make, message):
    path = make(tmp_path)
    assert run("train", path, "--vocab-size", 300, "--out", tmp_path / "tok", "--quiet") == 1
    assert message in error_line(capsys)
    assert not (tmp_path / "tok").exists()


def test_bad_settings_give_one_clear_line(shards, tmp_path, capsys):
    assert (
        run(
            "train",
            shards,
            "--vocab-size",
            257,
            "--special-token",
            "<a>",
            "--special-token",
            "<b>",
            "--out",
            tmp_path / "t",
        )
        == 1
    )
    assert "--vocab-size 257 is too small" in error_line(capsys)
    assert run("train", shards, "--vocab-size", 300, "--pattern", "(unclosed", "--out", tmp_path / "t") == 1
    assert "--pattern" in error_line(capsys)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    assert run("train", shards, "--vocab-size", 300, "--out", tmp_path / "busy") == 1
    assert "holds other files" in error_line(capsys)
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"


def test_running_out_of_pairs_warns_and_writes_a_smaller_tokenizer(tmp_path, capsys):
    path = tmp_path / "tiny.txt"
    path.write_text("abcd")
    assert run("train", path, "--vocab-size", 1000, "--out", tmp_path / "tok", "--quiet") == 0
    warned = "bpe: warning: pairs ran out after 3 merges; the vocabulary is smaller than asked\n"
    assert capsys.readouterr().err == warned
    assert run("train", path, "--vocab-size", 1000, "--out", tmp_path / "tok2") == 0
    assert "warning: pairs ran out after 3 merges" in capsys.readouterr().out
    tok = Tokenizer.load(tmp_path / "tok")
    assert tok.vocab_size == 259 and tok.encode("abcd") == [258]


# --- threads, versions ----------------------------------------------------------------------------


def test_threads_split_the_merge_loop_and_learn_the_same_merges(shards, tmp_path):
    """`--threads 3` counts on three threads and runs the merge loop over three word slices; the
    tokenizer is the same as on one thread, byte for byte."""
    for threads in ("1", "3"):
        out = tmp_path / threads
        assert run("train", shards, "--vocab-size", 400, "--threads", threads, "--out", out, "--quiet") == 0
    engine = json.loads((tmp_path / "3" / "manifest.json").read_text())["engine"]
    assert engine["threads"] == 3 and engine["merge_threads"] == 3
    assert (tmp_path / "3" / "merges.txt").read_bytes() == (tmp_path / "1" / "merges.txt").read_bytes()
    assert (tmp_path / "3" / "tokenizer.json").read_bytes() == (tmp_path / "1" / "tokenizer.json").read_bytes()


def test_versions_of_a_missing_store_is_an_error_and_of_an_empty_one_is_none(tmp_path, capsys):
    pytest.importorskip("prefect")
    assert run("versions", tmp_path / "missing" / "demo") == 1
    assert f"{tmp_path / 'missing' / 'demo'}: no such artifact store" in error_line(capsys)
    (tmp_path / "artifacts" / "demo").mkdir(parents=True)
    assert run("versions", tmp_path / "artifacts" / "demo") == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'artifacts' / 'demo'}: no versions"


# -- help that teaches: `bpe --help` in groups, every command with a description and an example ---


def test_bpe_help_lists_the_commands_in_groups_tokenizers_first_and_ends_with_examples():
    from bpe.cli import build_parser, commands

    done = subprocess.run(
        [str(Path(sys.executable).parent / "bpe"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    sections, title = {}, None
    for line in done.stdout.splitlines():
        if line and not line.startswith(" "):
            title = line
            sections[title] = []
        elif title and line.startswith("  ") and not line.startswith("   "):
            sections[title].append(line.split()[0])
    titles = [t for t in sections if t.endswith(":")]
    groups = {t.split()[0].rstrip(":"): sections[t] for t in titles}
    assert titles[0] == "tokenizers:" and groups["tokenizers"] == ["train", "count", "encode", "decode", "eval"]
    pipeline = ["demo", "deploy", "versions", "promote", "rollback", "history", "prune", "prune-cache"]
    assert groups["pipeline"] == pipeline and groups["cluster"] == ["cluster"] and groups["other"] == ["warm"]
    top = [prog.split()[1] for prog, _ in commands(build_parser()) if prog.count(" ") == 1]
    listed = [name for t in ("tokenizers", "pipeline", "cluster", "other") for name in groups[t]]
    assert sorted(listed) == sorted(top)  # every command, once
    assert titles[-1] == "examples:" and len(sections["examples:"]) == 2
    examples = done.stdout.split("examples:\n", 1)[1].splitlines()[:2]
    assert all("bpe train " in line or "bpe encode " in line for line in examples), examples


def test_a_core_command_reads_no_other_packages_entry_points_and_the_others_still_parse():
    """`bpe train` (and the other commands of the core) builds its parser without scanning every
    installed package for the commands other tiers register; those commands still parse, and a
    command that is neither is refused naming every command."""
    script = """
import contextlib, io, sys
from bpe.cli import main
for argv in (["train", "--help"], ["count", "--help"]):
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        main(argv)
print("bpe.pipeline.commands" in sys.modules, "importlib.metadata" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["False", "False"], (done.stdout, done.stderr[-2000:])
    bpe = str(Path(sys.executable).parent / "bpe")
    versions = subprocess.run([bpe, "versions", "--help"], capture_output=True, text=True, timeout=60)
    assert versions.returncode == 0 and versions.stdout.startswith("usage: bpe versions")
    unknown = subprocess.run([bpe, "trian"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode != 0 and "'versions'" in unknown.stderr and "'train'" in unknown.stderr


def test_every_command_has_a_description_and_an_example_of_itself():
    from bpe.cli import build_parser, commands

    lacking = []
    for prog, parser in commands(build_parser()):
        if prog == "bpe":
            continue
        examples = (parser.epilog or "").split("examples:\n", 1)[-1].splitlines() if parser.epilog else []
        if not parser.description or not any(prog in line for line in examples):
            lacking.append(prog)
    assert not lacking, f"commands without a description or an example: {lacking}"


def test_train_help_starts_with_a_short_usage_naming_what_is_required():
    from bpe.cli import build_parser, commands

    help = dict(commands(build_parser()))["bpe train"].format_help()
    usage = "usage: bpe train (INPUT... | --lang CODE=INPUT... | --counts DIR...) --vocab-size N --out DIR [options]"
    assert help.splitlines()[0] == usage


def test_versions_help_explains_every_column_it_prints(tmp_path, capsys):
    from bpe.cli import build_parser, commands
    from bpe.pipeline.store import VersionStore
    from tests.conftest import publish_as

    publish_as(VersionStore(str(tmp_path), "tok"))
    assert run("versions", f"{tmp_path}/tok") == 0
    header = capsys.readouterr().out.splitlines()[0]
    help = dict(commands(build_parser()))["bpe versions"].format_help()
    columns = help.split("columns:\n", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in columns.splitlines() if not line.startswith("    ")]  # not a wrapped line
    explained = [regex.split(r"\s{2,}", line.strip())[0] for line in rows]
    assert " ".join(explained).split() == header.split()
    words = " ".join(help.split())
    assert all(mark in words for mark in ("(latest)", "(promoted)", "(rollback target)"))
