"""A parallel dev set read from a directory: `<code>.txt` (a sentence per line) or `<code>.parquet`
(a sentence per row), languages in code order, line i the same sentence in every file; what is not
such a set is one line naming the file."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpe.evaluation.dev_set
from bpe.errors import InputError, SettingsError
from bpe.evaluation.dev_set import dev_set, read_dev_set, sentence_batches
from tests.conftest import write_parquet


def write_dev(tmp_path, **files: str):
    for name, text in files.items():
        (tmp_path / name.replace("_", ".")).write_bytes(text.encode("utf-8"))
    return tmp_path


def test_a_directory_of_text_and_parquet_files_is_read_in_code_order(tmp_path):
    write_dev(tmp_path, hin_txt="नमस्ते\nदुनिया\n", eng_txt="hello\r\nworld")  # CRLF; no final newline
    write_parquet(tmp_path / "arb.parquet", ["مرحبا", "عالم"])
    (tmp_path / "README.md").write_text("not a language")
    (tmp_path / "NOTES.txt").write_text("not named by a language code, so not part of the set\n")
    dev = read_dev_set(tmp_path)
    assert dev.codes == ("arb", "eng", "hin") and dev.sentences == 2
    assert dev.texts["eng"] == ["hello", "world"] and dev.texts["hin"] == ["नमस्ते", "दुनिया"]
    assert dev.sources["arb"] == str(tmp_path / "arb.parquet") and dev.location == str(tmp_path)
    assert read_dev_set(tmp_path, ["hin", "eng"]).codes == ("eng", "hin")


def test_blank_lines_are_sentences_so_the_lines_stay_parallel(tmp_path):
    write_dev(tmp_path, eng_txt="\ufeffa\n\nc\n", deu_txt="a\nb\nc\n")
    dev = read_dev_set(tmp_path)
    assert dev.texts["eng"] == ["a", "", "c"]  # the byte-order mark is not text


def test_the_fingerprint_changes_with_any_sentence_or_language(tmp_path):
    base = dev_set({"eng": ["a", "b"], "fra": ["c", "d"]})
    assert base.fingerprint() == dev_set({"fra": ["c", "d"], "eng": ["a", "b"]}).fingerprint()
    others = [
        {"eng": ["a", "b"], "fra": ["c", "e"]},
        {"eng": ["a", "b"], "frb": ["c", "d"]},
        {"eng": ["ab", ""], "fra": ["c", "d"]},
    ]
    assert len({base.fingerprint(), *(dev_set(o).fingerprint() for o in others)}) == 4


@pytest.mark.parametrize(
    "files, message",
    [
        ({"eng_txt": "a\nb\n", "hin_txt": "a\n"}, "{d}/hin.txt has 1 line but {d}/eng.txt has 2: a parallel dev set"),
        ({"eng_txt": "a\n", "eng_parquet": ""}, "{d}: both eng.txt and eng.parquet: keep one file per language"),
        ({"notes_md": "x", "Eng_txt": "a\n"}, "{d}: holds no <code>.txt or <code>.parquet file"),
        ({"eng_txt": "a\n", "tel_txt": "\udcff"}, "{d}/tel.txt: not UTF-8 text (invalid byte 0xff at offset 0)"),
    ],
)
def test_what_is_not_a_parallel_dev_set_is_one_line_naming_the_file(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name.replace("_", ".")).write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(InputError) as raised:
        read_dev_set(tmp_path)
    assert str(raised.value).startswith(message.format(d=tmp_path)) and "\n" not in str(raised.value)


def test_a_parquet_file_needs_its_text_column_and_text_in_every_row(tmp_path):
    write_parquet(tmp_path / "eng.parquet", ["a"], column="body")
    with pytest.raises(InputError, match=r"eng.parquet: no column 'text' \(it has body\)$"):
        read_dev_set(tmp_path)
    assert read_dev_set(tmp_path, text_column="body").texts == {"eng": ["a"]}
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "eng.parquet")
    with pytest.raises(InputError, match=r"eng.parquet: row 1: expected a sentence \(text\), got None$"):
        read_dev_set(tmp_path)


def test_a_missing_directory_or_language_is_named(tmp_path):
    with pytest.raises(InputError, match=r"nowhere: no such directory"):
        read_dev_set(tmp_path / "nowhere")
    write_dev(tmp_path, eng_txt="a\n")
    with pytest.raises(SettingsError) as raised:
        read_dev_set(tmp_path, ["eng", "hin"])
    assert str(raised.value) == f"languages: 'hin' is not in the dev set {tmp_path} (it has eng)"


def release_later(fifo) -> None:
    """Open `fifo` for writing, then close it, once a reader waits on it: a reader that blocks on
    the FIFO gets an empty file instead of waiting forever."""

    def release() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                continue

    threading.Thread(target=release, daemon=True).start()


@pytest.mark.parametrize("kind", ["a FIFO", "a character device", "a directory"])
def test_a_fifo_a_device_or_a_directory_is_refused_without_reading_it(tmp_path, kind):
    """Reading a FIFO waits for a writer forever, /dev/zero fills memory: a language's file that is
    not a regular file is one line naming it, and nothing is read from it."""
    write_dev(tmp_path, eng_txt="a\n")
    if kind == "a FIFO":
        os.mkfifo(tmp_path / "hin.txt")
        release_later(tmp_path / "hin.txt")
    elif kind == "a character device":
        (tmp_path / "hin.txt").symlink_to("/dev/zero")
    else:
        (tmp_path / "hin.txt").mkdir()
    with pytest.raises(InputError) as raised:
        read_dev_set(tmp_path)
    assert str(raised.value) == f"{tmp_path}/hin.txt: not a regular file ({kind}), so not a dev set's file"


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.text(st.sampled_from("ab é\r\U0001f600"), max_size=12), max_size=8),
    bom=st.booleans(),
    final_newline=st.booleans(),
    block=st.integers(1, 9),
)
def test_a_text_file_read_a_block_at_a_time_gives_its_lines(tmp_path_factory, lines, bom, final_newline, block):
    """However the file is cut into blocks (a line longer than a block, a character or a CRLF
    across two), the sentences are the file's lines, as read whole."""
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    path = tmp_path_factory.mktemp("blocks") / "eng.txt"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    expected = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(bpe.evaluation.dev_set, "BLOCK_BYTES", block)
        batches = list(sentence_batches(str(path)))
    assert [line for batch in batches for line in batch] == expected
    assert len(batches) <= max(1, len(expected))  # a batch per block of whole lines, never one per line more
