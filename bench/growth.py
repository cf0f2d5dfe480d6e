"""Benchmark: how each trainer's wall time and peak memory grow with the corpus, from the JSON files
of `bench.train --json` runs at several sizes (the English corpus, `--scale 500`, `--scale 2000`).

    python -m bench.train --only corpus --no-dask --json en.json
    python -m bench.train --only corpus --no-dask --scale 500 --json 500.json
    python -m bench.train --only corpus --no-dask --scale 2000 --repeat 1 --peer-limit 1200 --json 2000.json
    python -m bench.growth en.json 500.json 2000.json

For each trainer and size: the median wall time and peak memory, seconds per 100 MB of text, and
how much each grew from the size before (time x, against the text's x). A run stopped at its limit
shows as "> N s".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.train import median

TRAINERS = {"local": "bpe train", "rustbpe": "rustbpe", "sentencepiece": "sentencepiece", "hf": "Hugging Face"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files of bench.train --json, smallest corpus first")
    args = parser.parse_args()
    sizes = [json.loads(path.read_text()) for path in args.runs]
    for path, measured in zip(args.runs, sizes):
        if "corpus" not in measured:
            raise SystemExit(f"{path}: no corpus size in it (a bench.train --json run of the corpus part)")
    sizes.sort(key=lambda m: m["corpus"]["mb"])
    print("| trainer | text (MB) | wall (s) | s per 100 MB | wall grew | text grew | peak (MB) | peak grew |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, name in TRAINERS.items():
        before = None
        for measured in sizes:
            if key not in measured:
                continue
            mb, r = measured["corpus"]["mb"], median(measured[key])
            stopped = r.get("unfinished", False)
            wall = f"> {r['wall']:,.0f}" if stopped else f"{r['wall']:.2f}"
            per = "-" if stopped else f"{100 * r['wall'] / mb:.2f}"
            grew = peak_grew = text_grew = ""
            if before is not None:
                text_grew = f"{mb / before[0]:.1f}x"
                grew = ("> " if stopped else "") + f"{r['wall'] / before[1]['wall']:.1f}x"
                peak_grew = "-" if stopped else f"{r['peak_mb'] / before[1]['peak_mb']:.1f}x"
            peak = "-" if stopped else f"{r['peak_mb']:,.0f}"
            print(f"| {name} | {mb:,.0f} | {wall} | {per} | {grew} | {text_grew} | {peak} | {peak_grew} |")
            before = None if stopped else (mb, r)


if __name__ == "__main__":
    main()
