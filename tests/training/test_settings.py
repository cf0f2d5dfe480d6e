"""Settings: validated in one place, named by parameter in the library and by flag in the command,
and the names users choose from (engines, tie-breaks, patterns) defined once."""

from __future__ import annotations

import pytest

from bpe import train
from bpe.cli import build_parser, in_flags
from bpe.errors import SettingsError
from bpe.training.settings import ENGINES, PATTERNS, TIE_BREAKS, Settings

BAD = [
    ({"vocab_size": 100}, "vocab_size", "--vocab-size"),
    ({"vocab_size": 257, "special_tokens": ["<a>", "<b>"]}, "vocab_size", "--vocab-size"),
    ({"pattern": "(unclosed"}, "pattern", "--pattern"),
    ({"special_tokens": ["<a>", "<a>"]}, "special_tokens", "--special-token"),
    ({"min_frequency": 0}, "min_frequency", "--min-frequency"),
    ({"tie_break": "max"}, "tie_break", "--tie-break"),
    ({"engine": "spark"}, "engine", "--engine"),
    # past what the kernels hold (ids are u32, counts i64): refused as settings, before any kernel runs
    ({"vocab_size": 10**30}, "vocab_size", "--vocab-size"),
    ({"vocab_size": 2**32 + 1}, "vocab_size", "--vocab-size"),
    ({"min_frequency": 2**63}, "min_frequency", "--min-frequency"),
    ({"max_token_length": 10**20}, "max_token_length", "--max-token-length"),
    ({"superwords": True, "transition": 280, "max_words": 10**20}, "max_words", "--max-words"),
]


@pytest.mark.parametrize("bad, parameter, flag", BAD)
def test_library_errors_name_the_parameter_and_the_command_shows_the_flag(bad, parameter, flag):
    with pytest.raises(SettingsError) as raised:
        train(["some text"], **{"vocab_size": 300, **bad})
    message = str(raised.value)
    assert raised.value.parameter == parameter and message.startswith(f"{parameter}")
    assert "--" not in message  # a Python caller is not told about flags
    assert in_flags(raised.value).startswith(flag) and "\n" not in message


def test_settings_are_frozen_and_record_the_resolved_pattern():
    settings = Settings(vocab_size=300, pattern="gpt2", special_tokens=["<|endoftext|>"])
    assert settings.special_tokens == ("<|endoftext|>",) and settings.n_merges() == 300 - 256 - 1
    record = settings.record()
    assert record["pattern"] == "gpt2" and record["regex"].startswith("'(?:[sdmt]")
    with pytest.raises(AttributeError):
        settings.vocab_size = 400  # type: ignore[misc]


def test_the_command_offers_exactly_the_library_names():
    train_parser = build_parser()._subparsers._group_actions[0].choices["train"]
    choices = {action.dest: action.choices for action in train_parser._actions if action.choices}
    assert tuple(choices["tie_break"]) == TIE_BREAKS and tuple(choices["engine"]) == ENGINES
    assert set(PATTERNS) == {"gpt2", "cl100k", "o200k", "whitespace", "superbpe"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: train(["some text"], vocab_size=300, special_tokens="<s>"),
        lambda: Settings(vocab_size=300, special_tokens="<s>"),
    ],
    ids=["train", "Settings"],
)
def test_special_tokens_given_as_one_string_are_refused_as_not_a_list(make):
    """A bare str would be read as its characters ('<', 's', '>'): it is refused for what it is."""
    with pytest.raises(SettingsError) as raised:
        make()
    assert raised.value.parameter == "special_tokens"
    assert str(raised.value) == "special_tokens: expected a list of strings, got '<s>'"


@pytest.mark.parametrize(
    "name, largest", [("vocab_size", 2**32), ("min_frequency", 2**63 - 1), ("max_token_length", 2**31 - 1)]
)
def test_the_largest_numbers_the_kernels_hold_are_accepted_and_one_more_is_not(name, largest):
    """Token ids are unsigned 32-bit, so a vocabulary of 2**32 tokens is the largest; counts are 64-bit."""
    assert getattr(Settings(**{"vocab_size": 300, name: largest}), name) == largest
    with pytest.raises(SettingsError, match=rf"^{name}: expected at most {largest:,} .*, got {largest + 1}$"):
        Settings(**{"vocab_size": 300, name: largest + 1})


BAD_FLAGS = [
    (["--vocab-size", str(10**30), "--engine", "dask"], "--vocab-size: expected at most 4,294,967,296 tokens"),
    (["--max-token-length", str(10**20)], "--max-token-length: expected at most 2,147,483,647 bytes"),
    (["--superwords", "--transition", "280", "--max-words", str(10**20)], "--max-words: expected at most"),
    (["--min-frequency", str(10**20)], "--min-frequency: expected at most"),
    (["--also-save", "²"], "--also-save: expected vocabulary sizes from 256"),
    (["--also-save", "300,٢٨٠"], "--also-save: expected vocabulary sizes from 256"),
    # a local cluster of no, minus one or 10**20 worker processes: refused before any cluster starts
    (["--engine", "dask", "--workers", "0"], "--workers: expected an integer >= 1"),
    (["--engine", "dask", "--workers", "-1"], "--workers: expected an integer >= 1"),
    (["--engine", "dask", "--workers", str(10**20)], "--workers: expected at most 256 processes"),
]


@pytest.mark.parametrize("flags, message", BAD_FLAGS)
def test_numbers_past_what_the_kernels_hold_and_odd_digits_are_one_line_naming_the_flag(
    tmp_path, capsys, flags, message
):
    from bpe.cli import main

    path = tmp_path / "t.txt"
    path.write_text("some text to train on, " * 50)
    out = tmp_path / "tok"
    vocab_size = [] if "--vocab-size" in flags else ["--vocab-size", "400"]
    assert main(["train", str(path), *vocab_size, *flags, "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bpe: error: {message}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


COMMAND_SPELLING = [
    # `--max-token-length None` is refused by argparse: the message says how the command leaves it unset
    (
        ["--max-token-length", "1"],
        "--max-token-length: expected an integer >= 2 (bytes), got 1; leave it out for no limit",
    ),
    (["--transition", "300"], "--transition: only a superword run has one (--superwords)"),
    (
        ["--superwords", "--transition", "600"],
        "--transition: expected a vocabulary size from 256 (the bytes and the base's merges) to 400 "
        "(--vocab-size less the special tokens), got 600",
    ),
    (
        ["--superwords", "--transition", "300", "--max-words", "-1"],
        "--max-words: expected an integer >= 1, got -1; 0 for no limit",
    ),
    (
        ["--engine", "local", "--workers", "2"],
        "--scheduler, --workers and --scratch are for the dask engine (--engine dask)",
    ),
]


@pytest.mark.parametrize("flags, message", COMMAND_SPELLING)
def test_the_command_names_every_setting_in_an_error_by_its_flag(tmp_path, capsys, flags, message):
    """Composed from the schema's flags, not a Python message rewritten: every setting it names is a
    flag, and what leaves a setting unset is said as the command does it."""
    from bpe.cli import main

    path = tmp_path / "t.txt"
    path.write_text("some text to train on, " * 50)
    assert main(["train", str(path), "--vocab-size", "400", *flags, "--out", str(tmp_path / "tok"), "--quiet"]) == 1
    assert capsys.readouterr().err == f"bpe: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"transition": 300}, "transition: only a superword run has one (superwords=True)"),
        ({"max_token_length": 1}, "max_token_length: expected an integer >= 2 (bytes) or None (no limit), got 1"),
        ({"workers": 2}, "scheduler, workers and scratch are for the dask engine (engine='dask')"),
    ],
)
def test_the_library_names_settings_by_parameter_and_never_by_flag(options, message):
    with pytest.raises(SettingsError) as raised:
        train(["some text"], vocab_size=400, **options)
    assert str(raised.value) == message


def test_an_error_from_another_process_is_still_spelt_as_the_command_spells_it():
    """A Dask worker's error reaches its client pickled (the input a worker reads, a setting it
    checks): the command still names the flag."""
    import pickle

    from bpe.inputs.documents import missing_text_column
    from bpe.schema import check

    with pytest.raises(SettingsError) as raised:
        check("threads", 0)
    for error, flag in (
        (raised.value, "--threads"),
        (missing_text_column("a.jsonl:3: no field 'body'"), "--text-column"),
    ):
        sent = pickle.loads(pickle.dumps(error))
        assert type(sent) is type(error) and str(sent) == str(error) and sent.parameter == error.parameter
        assert in_flags(sent) == in_flags(error) and flag in in_flags(sent)
