"""Settings: validated in one place, named by parameter in the library and by flag in the command,
and the names users choose from (engines, tie-breaks, patterns) defined once."""

from __future__ import annotations

import pytest

from bpe import train
from bpe.cli import build_parser, in_flags
from bpe.errors import SettingsError
from bpe.settings import ENGINES, PATTERNS, TIE_BREAKS, Settings

BAD = [
    ({"vocab_size": 100}, "vocab_size", "--vocab-size"),
    ({"vocab_size": 257, "special_tokens": ["<a>", "<b>"]}, "vocab_size", "--vocab-size"),
    ({"pattern": "(unclosed"}, "pattern", "--pattern"),
    ({"special_tokens": ["<a>", "<a>"]}, "special_tokens", "--special-token"),
    ({"min_frequency": 0}, "min_frequency", "--min-frequency"),
    ({"tie_break": "max"}, "tie_break", "--tie-break"),
    ({"engine": "spark"}, "engine", "--engine"),
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
