"""Exact, fast byte-level BPE training.

>>> from bpe import train, Tokenizer
>>> tok = train(["hello hello world"], vocab_size=260, pattern="gpt2")
>>> tok.decode(tok.encode("hello world"))
'hello world'

The package is built in tiers whose imports point one way:

- `bpe` (this package's top-level modules) and `bpe.engine` (the compiled kernels): the library,
  with no Prefect and no Dask;
- `bpe.distributed`: the Dask engine (the `[dask]` extra);
- `bpe.pipeline`: what the Prefect flows need: configuration, version store, evaluation, reports,
  services (the `[pipeline]` extra); the flows and tasks themselves ship as `bpe.flows`, `bpe.tasks`.
"""

from bpe.tokenizer import Tokenizer
from bpe.train import train

__all__ = ["Tokenizer", "train"]
__version__ = "0.1.0"
