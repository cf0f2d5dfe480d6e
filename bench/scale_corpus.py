"""A large corpus built from the shared English shards, whose unique words keep growing with its
size, as in web text (repeating the shards would not: their words stop being new after the first
copy). Copy k of the text is spelled in its own alphabet: each Latin letter maps, through a
permutation drawn from k, to a letter of Latin, Cyrillic, Armenian or Georgian. Every copy keeps
English's word-frequency curve and word lengths, and brings its own new words, in scripts whose
UTF-8 is one to three bytes per letter.

    python -m bench.scale_corpus --size 500 --out /tmp/bpe-scale-500    # at least 500 MB of text
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.measure import REPO

SCRIPTS = {  # lowercase and uppercase letters, at least 26 each
    "latin": (string.ascii_lowercase, string.ascii_uppercase),
    "cyrillic": ("".join(map(chr, range(0x430, 0x450))), "".join(map(chr, range(0x410, 0x430)))),
    "armenian": ("".join(map(chr, range(0x561, 0x587))), "".join(map(chr, range(0x531, 0x557)))),
    "georgian": ("".join(map(chr, range(0x10D0, 0x10F1))), "".join(map(chr, range(0x1C90, 0x1CB1)))),
}


def alphabet(copy: int) -> dict[int, str]:
    """The letter mapping of copy `copy`: copy 0 is the English text itself."""
    if copy == 0:
        return {}
    script = list(SCRIPTS)[copy % len(SCRIPTS)]
    lower, upper = SCRIPTS[script]
    rng = random.Random(copy)
    chosen = rng.sample(range(len(lower)), 26)
    table = {ord(a): lower[i] for a, i in zip(string.ascii_lowercase, chosen)}
    table.update({ord(a): upper[i] for a, i in zip(string.ascii_uppercase, chosen)})
    return table


def scaled_corpus(source: Path, size_mb: float) -> Path:
    """The corpus of `size_mb` MB built from `source` (`--scale`), built once into the bench cache
    (~/.cache/bpe/bench/scale-<MB>) and said in one line."""
    scaled = Path.home() / ".cache" / "bpe" / "bench" / f"scale-{size_mb:g}"
    built = build(source, scaled, size_mb)
    print(f"scale corpus {scaled}: {built['text_bytes'] / 1e6:,.0f} MB, {built['copies']} copies of {source}")
    return scaled


def build(source: Path, out: Path, size_mb: float, text_column: str = "text") -> dict:
    """Write copies of `source`'s shards into `out` until they hold `size_mb` MB of UTF-8 text;
    returns (and writes to out/.corpus.json) what was built. Reuses a finished build."""
    record = out / ".corpus.json"  # hidden: a walk of the corpus directory skips it
    if record.exists():
        built = json.loads(record.read_text())
        if built["size_mb"] == size_mb and built["source"] == str(source):
            return built
    out.mkdir(parents=True, exist_ok=True)
    shards = sorted(source.glob("*.parquet"))
    if not shards:
        sys.exit(f"no Parquet shards in {source}")
    total = rows = copy = 0
    while total < size_mb * 1e6:
        table = alphabet(copy)
        for shard in shards:
            texts = pq.read_table(shard, columns=[text_column]).column(text_column).to_pylist()
            mapped = [t.translate(table) for t in texts if t is not None]
            pq.write_table(pa.table({text_column: mapped}), out / f"copy-{copy:03d}-{shard.name}")
            total += sum(len(t.encode()) for t in mapped)
            rows += len(mapped)
            if total >= size_mb * 1e6:
                break
        copy += 1
    built = {"source": str(source), "size_mb": size_mb, "text_bytes": total, "rows": rows, "copies": copy}
    record.write_text(json.dumps(built))
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO.parent / "shared" / "corpora" / "en")
    parser.add_argument("--size", type=float, default=500, help="MB of UTF-8 text to reach")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    built = build(args.source, args.out, args.size)
    print(f"{args.out}: {built['text_bytes'] / 1e6:,.0f} MB of text, {built['rows']:,} rows, {built['copies']} copies")


if __name__ == "__main__":
    main()
