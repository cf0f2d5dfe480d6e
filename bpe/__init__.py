"""Exact, fast byte-level BPE training.

>>> from bpe import train, Tokenizer
>>> tok = train(["hello hello world"], vocab_size=260, pattern="gpt2")
>>> tok.decode(tok.encode("hello world"))
'hello world'
"""

from bpe.tokenizer import Tokenizer
from bpe.train import train

__all__ = ["Tokenizer", "train"]
__version__ = "0.1.0"
