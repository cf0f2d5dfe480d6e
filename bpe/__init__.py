"""Exact, fast byte-level BPE training.

>>> from bpe import train, Tokenizer
>>> tok = train(["hello hello world"], vocab_size=260, pattern="gpt2")
>>> tok.decode(tok.encode("hello world"))
'hello world'

`count` counts a corpus's pre-tokens once, for `train(counts=...)` here or elsewhere
(`bpe.training.counts_files` says their format). `evaluate` measures tokenizers language by
language on a parallel dev set (`bpe.evaluation.evaluate`).

The package is built in tiers whose imports point one way:

- the library, with no Prefect and no Dask: `bpe`'s few top-level modules (errors, schema,
  manifest, storage, ...) and its packages in the order of the data: `bpe.engine` (the compiled
  kernels), `bpe.languages`, `bpe.inputs`, `bpe.formats`, `bpe.tokenizer`, `bpe.evaluation`,
  `bpe.training` and `bpe.cli`;
- `bpe.distributed`: the Dask engine (the `[dask]` extra);
- `bpe.pipeline`: what the Prefect flows need: configuration, version store, evaluation, reports,
  services (the `[pipeline]` extra); the flows and tasks themselves ship as `bpe.flows`, `bpe.tasks`.
"""

import os

__all__ = ["Tokenizer", "count", "evaluate", "train"]
__version__ = "0.1.0"

# numba colours its error messages with colorama when that is installed (Prefect brings it), and
# colorama's exit handler then prints ESC[0m to a terminal after everything else: a stray escape
# after the summary of `bpe train`. Plain messages; set the variable to 0 for coloured ones.
os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")

# `train`, `count`, `Tokenizer` and `evaluate` are imported when first used: `import bpe` (and so `bpe --help`)
# loads neither numpy nor numba.
_LAZY = {
    "train": "bpe.training.trainer",
    "count": "bpe.training.trainer",
    "Tokenizer": "bpe.tokenizer",
    "evaluate": "bpe.evaluation.evaluate",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bpe' has no attribute {name!r}")
