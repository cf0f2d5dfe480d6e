"""GPT-2's files as we write them: vocab.json is what `json.dumps(..., ensure_ascii=False, indent=0)`
writes, byte for byte, whatever the spellings hold (quotes, backslashes, control characters, text
beyond ASCII), with special tokens and with ids of another tool's numbering."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.formats.gpt2 import vocab_json, write_vocab

names = st.lists(st.text(max_size=6), max_size=12, unique=True)


@settings(max_examples=200, deadline=None)
@given(names=names, data=st.data())
def test_vocab_json_is_written_as_the_json_module_writes_it(names, data, tmp_path_factory):
    specials = data.draw(st.dictionaries(st.text(min_size=1, max_size=4).filter(lambda t: t not in names),
                                         st.integers(len(names), len(names) + 9), max_size=3))  # fmt: skip
    ids = data.draw(st.none() | st.permutations(range(len(names))).map(list))
    if ids is not None and ids:
        ids[0] = data.draw(st.sampled_from([ids[0], None]))  # a byte without an id in the file
    path = tmp_path_factory.mktemp("vocab") / "vocab.json"
    write_vocab(path, names, specials, ids)
    expected = json.dumps(vocab_json(names, specials, ids), ensure_ascii=False, indent=0) + "\n"
    assert path.read_bytes() == expected.encode("utf-8")
    assert json.loads(path.read_text(encoding="utf-8")) == vocab_json(names, specials, ids)
