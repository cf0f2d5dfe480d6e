"""Documents as Arrow string arrays, built from their UTF-8 bytes.

`pa.array(list_of_str)` imports pandas the first time it runs (pyarrow checks whether the list is
a pandas object): a quarter of a second and 60 MB in every process that reads text, more than a
small training run needs in all. Building the array from its buffers imports nothing.

>>> large_strings(["a", None, "bc"]).to_pylist()
['a', None, 'bc']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def large_strings(texts: Sequence[str | None]) -> pa.LargeStringArray:
    """`texts` as a large_string array (None: a null). A lone surrogate raises UnicodeEncodeError,
    as `pa.array` does."""
    encoded = [b"" if text is None else text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    nulls = [text is None for text in texts]
    validity = None
    if any(nulls):
        validity = pa.py_buffer(np.packbits(~np.array(nulls, dtype=bool), bitorder="little"))
    return pa.LargeStringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)), validity, sum(nulls)
    )
