"""Progress and the command around it: bars in the summary's units and rates (text bytes, merges
of the loop), with elapsed time and a real ETA; `train(progress=True)`; `bpe train --json`;
`bpe --version`; a `bpe --help` that loads no numba; help for every option; no stray escapes."""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from bpe import train
from bpe.cli import build_parser, main
from bpe.cli.train import summary
from bpe.progress import Bars, LogProgress
from tests.conftest import REPO, write_parquet


def documents(n: int = 2000, seed: int = 0, distinct: int = 3000) -> list[str]:
    """Text with many distinct words (so that a vocabulary of 1,500 is reached), compressing well
    in Parquet (so that file bytes and text bytes differ)."""
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 8))) for _ in range(distinct)]
    return [" ".join(rng.choices(words, k=40)) for _ in range(n)]


def recorded(**options) -> tuple[dict, list[tuple[str, int, int | None, float]]]:
    """Train with a progress callable; the manifest and every call, with the time it came."""
    calls: list[tuple[str, int, int | None, float]] = []
    tokenizer = train(
        progress=lambda phase, done, total: calls.append((phase, done, total, time.perf_counter())), **options
    )
    return tokenizer.manifest, calls


def test_counting_reports_the_text_bytes_the_summary_counts(tmp_path):
    data = write_parquet(tmp_path / "d.parquet", documents())
    manifest, calls = recorded(files=data, vocab_size=1500, pattern="gpt2")
    count = [c for c in calls if c[0] == "count"]
    text_bytes = manifest["counts"]["bytes"]
    assert text_bytes > data.stat().st_size  # not the file's bytes (Parquet compresses)
    assert count[0][1] == 0  # the bar starts when counting does
    assert count[-1][1:3] == (text_bytes, text_bytes)  # ends exact: the summary's figure
    assert all(0 <= done <= total for _, done, total, _ in count)
    assert [done for _, done, _, _ in count] == sorted(done for _, done, _, _ in count)


def test_a_byte_limit_caps_the_estimated_total(tmp_path):
    data = write_parquet(tmp_path / "d.parquet", documents())
    manifest, calls = recorded(files=data, vocab_size=300, pattern="gpt2", limit="100KB")
    count = [c for c in calls if c[0] == "count"]
    assert manifest["counts"]["bytes"] <= 100_000 and count[-1][1:3] == (manifest["counts"]["bytes"],) * 2
    assert all(total <= 100_000 for _, _, total, _ in count)


def test_in_memory_texts_report_counting_too():
    texts = documents(300)
    manifest, calls = recorded(texts=texts, vocab_size=300, pattern="gpt2")
    count = [c for c in calls if c[0] == "count"]
    assert count[0][1] == 0 and count[-1][1:3] == (manifest["counts"]["bytes"],) * 2
    assert count[-1][1] == sum(len(t.encode()) for t in texts)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_merge_rate_is_that_of_the_loop_alone_in_bar_and_summary(tmp_path, threads):
    """The merge bar starts when the loop does (after the word table and the pair counts are
    built) and the summary's merges/s is over the same seconds: `seconds.merge_loop`."""
    data = write_parquet(tmp_path / "d.parquet", documents())
    manifest, calls = recorded(files=data, vocab_size=1500, pattern="gpt2", threads=threads)
    merge = [c for c in calls if c[0] == "merge"]
    merges, seconds = manifest["result"]["merges"], manifest["seconds"]
    assert merge[0][1] == 0 and merge[-1][1] == merges == 1500 - 256
    assert all(total == 1500 - 256 for _, _, total, _ in merge)
    assert seconds["merge_loop"] == pytest.approx(merge[-1][3] - merge[0][3], abs=2e-3)
    assert 0 < seconds["merge_loop"] <= seconds["merge"]
    assert f"{merges / seconds['merge_loop']:,.0f} merges/s" in summary(manifest, tmp_path / "tok")


def test_a_bar_shows_elapsed_time_rate_and_a_real_eta(monkeypatch):
    import tqdm.std

    now = [1000.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    out = io.StringIO()
    bars = Bars(file=out, force=True)
    bars("count", 0, 30_000_000)
    now[0] += 1
    bars("count", 10_000_000, 45_000_000)  # the estimate of the total grows as text is counted
    assert "| 10.0M/45.0M [00:01<00:03, 10.0MB/s]" in out.getvalue()
    bars("merge", 0, 1000)  # a new phase: a new bar, its own clock
    now[0] += 10
    bars("merge", 100, 1000)
    assert "100/1.00k [00:10<01:30, 10.0 merges/s]" in out.getvalue()  # 900 to go at 10 a second
    now[0] += 90
    bars("merge", 1000, 1000)
    bars.finish()
    assert out.getvalue().endswith("1.00k/1.00k [01:40<00:00, 10.0 merges/s]\n")


def test_log_lines_use_the_same_units_rates_and_eta():
    now = [0.0]
    lines: list[str] = []
    log = LogProgress(lines.append, every=5.0, clock=lambda: now[0])
    log("count", 0, 30_000_000)
    now[0] = 1.0
    log("count", 10_000_000, 45_000_000)
    log("count", 45_000_000, 45_000_000)
    log("merge", 0, 1000)
    now[0] = 11.0
    log("merge", 100, 1000)
    now[0] = 21.0
    log("merge", 1000, 1000)
    assert lines == [
        "count: 0 B of about 30.0 MB (0%) in 0:00",
        "count: 45.0 MB (100%) in 0:01, 45.0 MB/s",
        "merge: 0 of 1,000 merges (0%) in 0:00",
        "merge: 100 of 1,000 merges (10%) in 0:10, 10 merges/s, about 1:30 left",
        "merge: 1,000 merges (100%) in 0:20, 50 merges/s",
    ]


def test_train_progress_true_shows_bars_false_and_none_nothing(capsys):
    texts = documents(300)
    train(texts, vocab_size=300, pattern="gpt2", progress=True)
    err = capsys.readouterr().err
    assert "count" in err and "merge" in err and "merges/s" in err and "B/s" in err
    for quiet in (False, None):
        train(texts, vocab_size=300, pattern="gpt2", progress=quiet)
        assert capsys.readouterr().err == ""


def test_progress_must_be_a_flag_or_a_callable():
    from bpe.errors import SettingsError

    with pytest.raises(SettingsError, match="progress: expected"):
        train(["a b"], vocab_size=257, progress="yes")


# --- the command ------------------------------------------------------------------------------


def bpe(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpe.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_version():
    done = bpe("--version", cwd=REPO)
    assert done.returncode == 0 and done.stdout == f"bpe {version('bpe-trainer')}\n"
    import bpe as package

    assert package.__version__ == version("bpe-trainer")


LOADED_AFTER = """
import sys
from bpe.cli import main
for argv in {argvs!r}:
    try:
        main(argv)
    except SystemExit:
        pass
print("loaded:", *sorted(m for m in ("numba", "numpy", "pyarrow") if m in sys.modules))
"""


def commands(parser: argparse.ArgumentParser, path: list[str]):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, [*path, name])


def test_help_and_version_load_neither_numba_nor_numpy():
    """`bpe --help`, `bpe <command> --help` and `bpe --version` start fast: the package and the
    command's module import nothing heavy until a command runs."""
    argvs = [[*path, "--help"] for path in commands(build_parser(), [])] + [["--version"]]
    done = subprocess.run(
        [sys.executable, "-c", LOADED_AFTER.format(argvs=argvs)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded:"


def test_every_option_and_command_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing.extend(f"{path} {a.dest}" for a in action._choices_actions if not a.help)
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "bpe")
    assert not missing


def test_json_prints_the_summary_as_one_object_matching_the_manifest(tmp_path, capsys):
    data = write_parquet(tmp_path / "data" / "d.parquet", documents(300) + [None])
    out = tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "400", "--out", str(out), "--threads", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no bars, no notices
    record = json.loads(captured.out)  # the whole of stdout is one object
    manifest = json.loads((out / "manifest.json").read_text())
    c, r = manifest["counts"], manifest["result"]
    assert record["out"] == str(out)
    assert (record["vocab_size"], record["merges"], record["stop_reason"]) == (400, r["merges"], "vocab_size")
    assert record["bytes_per_token"] == r["bytes_per_token"]
    assert record["files"] == 1 and record["inputs"] == "1 Parquet"
    for key in ("documents", "null_rows", "bytes", "pretokens", "unique_words"):
        assert record[key] == c[key], key
    assert record["engine"] == manifest["engine"] and record["engine"]["threads"] == 2
    for key in ("count", "merge", "merge_loop", "export"):
        assert record["seconds"][key] == manifest["seconds"][key], key
    assert record["seconds"]["total"] >= manifest["seconds"]["total"]  # the command's, export included
    assert record["merges_per_second"] == pytest.approx(r["merges"] / manifest["seconds"]["merge_loop"], rel=1e-3)
    assert record["bytes_per_second"] == pytest.approx(c["bytes"] / manifest["seconds"]["count"], rel=1e-3)
    assert record["warnings"] == []


def index_calls(calls: list, phase: str = "index") -> list[tuple[int, int | None]]:
    """(done, total) of every report of the `phase` that builds the word tables, checked to come
    after the counting and before the merge loop of its stage."""
    prefix = phase[: -len("index")]
    order = [c[0] for c in calls if c[0].startswith(prefix) and c[0][len(prefix) :] in ("count", "index", "merge")]
    first, last = order.index(phase), len(order) - order[::-1].index(phase) - 1
    assert prefix + "count" not in order[first:] and prefix + "merge" not in order[: last + 1], order
    return [(done, total) for name, done, total, _ in calls if name == phase]


@pytest.mark.parametrize("threads", [1, 2])
def test_building_the_word_tables_reports_every_word_between_counting_and_merging(tmp_path, threads, monkeypatch):
    """Between the count bar and the merge bar the word tables are built (a second superword stage
    spent 143 s there at 2 GB without a bar): the `index` phase counts the unique words, from 0 to
    all of them, a chunk at a time, on any number of threads, and with a base replayed first."""
    from bpe.engine import replay, word_table

    monkeypatch.setattr(word_table, "INDEX_CHUNK", 500)
    monkeypatch.setattr(replay, "REPLAY_CHUNK", 500)
    data = write_parquet(tmp_path / "d.parquet", documents(2000, distinct=5000))
    manifest, calls = recorded(files=data, vocab_size=1500, pattern="gpt2", threads=threads)
    words = manifest["counts"]["unique_words"]
    index = index_calls(calls)
    assert index[0] == (0, words) and index[-1] == (words, words) and len(index) > 4
    assert [done for done, _ in index] == sorted(done for done, _ in index) and {t for _, t in index} == {words}

    base = tmp_path / "base"
    train(files=data, vocab_size=600, pattern="gpt2").save(base)
    manifest, calls = recorded(files=data, base=base, vocab_size=1500, threads=threads)
    index = index_calls(calls)
    assert index[0] == (0, words) and index[-1] == (words, words) and len(index) > 8  # replayed, then indexed
    assert [done for done, _ in index] == sorted(done for done, _ in index)


def test_a_superword_runs_second_stage_reports_its_pieces_indexed():
    texts = documents(400)
    manifest, calls = recorded(texts=texts, vocab_size=700, superwords=True, transition=600, threads=2)
    pieces = manifest["counts"]["unique_words"]  # the tokenizer's split: the second stage's pieces
    assert index_calls(calls, "superword index")[-1] == (pieces, pieces)
    words = index_calls(calls)[-1]  # the first stage's words, reported under its own name
    assert words[0] == words[1] != pieces


def test_a_run_from_a_base_says_what_it_replayed_and_rates_only_what_it_learnt(tmp_path, capsys):
    """`--from` showed `merges 50,100 ... 365,693 merges/s` for 50,000 merges replayed and 100
    learnt: the rate divided the replayed ones too by the loop's seconds, which only learns."""
    from bpe import Tokenizer

    data = write_parquet(tmp_path / "d.parquet", documents(10_000, distinct=50_000))  # a loop of milliseconds
    base, out = tmp_path / "base", tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "1000", "--out", str(base), "--quiet"]) == 0
    assert main(["train", str(data), "--from", str(base), "--vocab-size", "3000", "--out", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    replayed, merges = len(Tokenizer.load(base).merges), len(Tokenizer.load(out).merges)
    learnt, loop = merges - replayed, json.loads((out / "manifest.json").read_text())["seconds"]["merge_loop"]
    assert (replayed, merges) == (1000 - 256, 3000 - 256)
    text = summary(Tokenizer.load(out).manifest, out)
    assert f"loop {loop:.2f} s, {learnt / loop:,.0f} merges/s)" in text, text
    assert f"merges    {merges:,}: {replayed:,} replayed from the base, {learnt:,} learnt (" in text, text
    assert record["merges_per_second"] == pytest.approx(learnt / loop, rel=1e-3)
    assert (record["merges"], record["base_merges"], record["new_merges"]) == (merges, replayed, learnt)

    # The loop's seconds are those of learning alone: its bar starts after the replay, for the merges learnt.
    manifest, calls = recorded(files=data, base=base, vocab_size=3000)
    merge = [c for c in calls if c[0] == "merge"]
    assert merge[0][1:3] == (0, learnt) and merge[-1][1:3] == (learnt, learnt)
    assert manifest["seconds"]["merge_loop"] == pytest.approx(merge[-1][3] - merge[0][3], abs=2e-3)


# GPT-2's split pattern, as its encoder.py spells it: the words a superword run's first stage counts.
GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def test_a_superword_runs_data_line_counts_words_and_its_second_stage_pieces_apart(tmp_path, capsys):
    """A superword run's `data` line gave the second stage's pieces as "pre-tokens" and "unique
    words": the words are what the run's pattern cuts (stage 1), the pieces are said as pieces."""
    import regex

    texts = documents(400)
    data = write_parquet(tmp_path / "d.parquet", texts)
    out = tmp_path / "tok"
    options = ["--pattern", GPT2_REGEX, "--superwords", "--transition", "600", "--vocab-size", "700"]
    assert main(["train", str(data), *options, "--out", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    words = [m.group() for text in texts for m in regex.finditer(GPT2_REGEX, text)]
    counts = json.loads((out / "manifest.json").read_text())["counts"]  # the tokenizer's split: pieces
    assert counts["unique_words"] != len(set(words))  # the two stages' figures differ here
    from bpe import Tokenizer

    lines = summary(Tokenizer.load(out).manifest, out).splitlines()
    data_line = next(line for line in lines if line.startswith("  data "))
    assert data_line.endswith(f", {len(words):,} pre-tokens, {len(set(words)):,} unique words"), data_line
    stages = next(line for line in lines if line.startswith("  stages "))
    assert stages.endswith(f"over {counts['pretokens']:,} pieces ({counts['unique_words']:,} unique pieces)")
    assert (record["pretokens"], record["unique_words"]) == (len(words), len(set(words)))
    assert (record["pieces"], record["unique_pieces"]) == (counts["pretokens"], counts["unique_words"])


def test_a_superword_runs_counting_rate_is_over_each_pass_of_its_text(tmp_path, capsys):
    """Both stages of a superword run count the text: the rate divided its bytes, counted once, by
    the two passes' time, and showed about half the speed of counting."""
    data = write_parquet(tmp_path / "d.parquet", documents(400))
    out = tmp_path / "tok"
    options = ["--superwords", "--transition", "600", "--vocab-size", "700", "--out", str(out)]
    assert main(["train", str(data), *options, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    stages = json.loads((out / "manifest.json").read_text())["superwords"]["stages"]
    seconds = [stage["seconds"]["count"] for stage in stages]  # rounded to the millisecond: a pass here takes a few
    slowest, fastest = record["bytes"] / (max(seconds) + 0.0005), record["bytes"] / max(min(seconds) - 0.0005, 1e-9)
    assert record["count_passes"] == 2
    assert slowest * 0.99 <= record["bytes_per_second"] <= fastest * 1.01, (seconds, record)
    from bpe import Tokenizer

    time_line = next(line for line in summary(Tokenizer.load(out).manifest, out).splitlines() if "  time " in line)
    assert "count " in time_line and "(2 passes, " in time_line, time_line


def test_piped_output_has_no_bars_and_no_escape_sequences(tmp_path):
    data = write_parquet(tmp_path / "d.parquet", documents(300))
    done = bpe("train", data, "--vocab-size", 300, "--out", tmp_path / "tok", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stdout + done.stderr and "\r" not in done.stderr
    assert "merges/s" in done.stdout


def on_a_terminal(command: list[str], rows: int, columns: int, cwd: Path, env: dict | None = None) -> tuple[int, str]:
    """Run `command` with a pseudo-terminal of `rows` x `columns` as its stdin, stdout and stderr:
    its exit code and all it wrote there."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the command has exited and closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return process.wait(timeout=600), output.decode(errors="replace")


@pytest.mark.parametrize("size", [(24, 120), (0, 0)])  # a new pseudo-terminal's size is unknown: 0 x 0
def test_a_terminal_gets_bars_and_no_stray_escape_sequence(tmp_path, size):
    """numba colours its error messages with colorama when it is installed, whose exit handler
    printed ESC[0m to a terminal after the summary."""
    data = write_parquet(tmp_path / "d.parquet", documents(300))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"}
    command = [sys.executable, "-m", "bpe.cli", "train", str(data), "--vocab-size", "300", "--out", "tok"]
    code, text = on_a_terminal(command, *size, cwd=tmp_path, env=env)
    assert code == 0, text[-2000:]
    assert "\x1b" not in text, repr(text[-300:])
    assert "merges/s]" in text and "B/s]" in text  # the bars (tqdm's), then the summary
