"""A trained tokenizer (`Tokenizer`): merges + pattern + special tokens, with encode/decode, save
and load. Encoding runs on tiktoken (ranks = merge order); where tiktoken cannot take a
vocabulary (two tokens with the same bytes) a plain Python encoder applies the merges in order.

>>> tok = Tokenizer([(104, 105)], pattern="gpt2")   # one merge: b"h" + b"i" -> 256
>>> tok.encode("hi hi")
[256, 32, 256]
>>> tok.decode([256, 32, 256])
'hi hi'

`Tokenizer.load` also reads what other tools make (see `bpe.formats`): GPT-2's vocab.json +
merges.txt, a Hugging Face byte-level BPE tokenizer.json, a tiktoken ranks file (with its split
pattern); `from_tiktoken` and `to_tiktoken` convert from and to a `tiktoken.Encoding`.

One module per concern: `core` (the class), `vocabulary` (tokens and ids), `encoding` (the
encoders), `conversions` (tiktoken), `persistence` (save and load), `truncation` (smaller
vocabularies).
"""

from bpe.tokenizer.core import Tokenizer, check_model_max_length

__all__ = ["Tokenizer", "check_model_max_length"]
