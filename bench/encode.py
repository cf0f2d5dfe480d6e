"""Benchmark: encoding a corpus with our `Tokenizer` against tiktoken and Hugging Face `tokenizers`
on the same ranks, and the `bpe encode` command end to end, in one run.

    python -m bench.encode [--data ../shared/corpora/en] [--vocab-size 32768] [--pattern cl100k] [--repeat 3]

The tokenizer is trained once on --data by `bpe train` (with `<|endoftext|>`) and kept in
--tokenizer (default /tmp/bpe-bench-encode/<pattern>-<vocab>). Every non-null row of the Parquet
files is encoded by:

- ours: `Tokenizer.encode_batch` (lists), and `Tokenizer.encode_batch_to_numpy` (one flat array);
- tiktoken: `Encoding.encode_batch` of `to_tiktoken()`, the same ranks, pattern and special tokens;
- Hugging Face: `encode_batch` and `encode_batch_fast` of the tokenizer.json `bpe train` wrote;
- `bpe encode DATA --out ids.npy` (and `ids.txt`): the command, reading the Parquet files itself;
- `bpe encode FILE`: the command on a --text-mb MB text file built from the rows (one per line),
  as one document into ids.npy and one document per line into ids.txt: its peak memory is the
  point (bounded, whatever the size of the input).

Each encoder runs in a process of its own (`python -m bench.encode run ...`), which reads the rows
first (not timed) and times the encoding alone; peak memory is the whole process's (rows included,
the same for every library encoder). The command is timed from start to exit. All use --threads
threads (HF: RAYON_NUM_THREADS). Runs are interleaved and repeated; the medians are reported, with
ratios to tiktoken measured in the same run. Every encoder must give the same number of ids.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import REPO, bpe_train, python, run
from bench.peers import parquet_texts

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"
LIBRARY = ("ours", "ours-numpy", "tiktoken", "tiktoken-loop", "hf", "hf-fast")
NAMES = {
    "ours": "bpe `Tokenizer.encode_batch` (lists)",
    "ours-numpy": "bpe `Tokenizer.encode_batch_to_numpy`",
    "tiktoken": "tiktoken `Encoding.encode_batch`",
    "tiktoken-loop": "tiktoken `Encoding.encode`, one row after another (1 thread)",
    "hf": "HF tokenizers `encode_batch`",
    "hf-fast": "HF tokenizers `encode_batch_fast`",
    "cli-npy": "`bpe encode DATA --out ids.npy` (end to end)",
    "cli-txt": "`bpe encode DATA --out ids.txt` (end to end)",
}


def encode(encoder: str, tokenizer: str, data: str, threads: int) -> dict:
    """Read the rows, then time `encoder` on them: {"seconds", "ids", "bytes", "rows"}."""
    rows = list(parquet_texts(data))
    text_bytes = sum(len(t.encode("utf-8")) for t in rows)
    if encoder.startswith("hf"):
        from tokenizers import Tokenizer as HF

        hf = HF.from_file(str(Path(tokenizer) / "tokenizer.json"))
        method = hf.encode_batch_fast if encoder == "hf-fast" else hf.encode_batch
        started = time.perf_counter()
        out = method(rows, add_special_tokens=False)
        seconds = time.perf_counter() - started
        ids = sum(len(e.ids) for e in out)
    else:
        from bpe import Tokenizer

        tok = Tokenizer.load(tokenizer)
        if encoder.startswith("tiktoken"):
            encoding = tok.to_tiktoken()
            started = time.perf_counter()
            if encoder == "tiktoken":
                out = encoding.encode_batch(rows, num_threads=threads, allowed_special="all")
            else:
                out = [encoding.encode(text, allowed_special="all") for text in rows]
        elif encoder == "ours":
            tok.encode("warm up")  # builds the encoder once, as tiktoken's was built by to_tiktoken()
            started = time.perf_counter()
            out = tok.encode_batch(rows, num_threads=threads)
        else:
            tok.encode("warm up")
            started = time.perf_counter()
            flat, _ = tok.encode_batch_to_numpy(rows, num_threads=threads)
            out = [flat]
        seconds = time.perf_counter() - started
        ids = sum(len(x) for x in out)
    return {"seconds": seconds, "ids": ids, "bytes": text_bytes, "rows": len(rows)}


def trained(data: Path, vocab_size: int, pattern: str, out: Path) -> Path:
    if not (out / "tokenizer.json").exists():
        print(f"training the {vocab_size:,}-token {pattern} tokenizer into {out} ...", flush=True)
        run(bpe_train(data, vocab_size, out, "--pattern", pattern, "--special-token", "<|endoftext|>"))
    return out


def text_file(data: Path, mb: float, directory: Path) -> Path:
    """A text file of `mb` MB made of the corpus rows, one per line (their own newlines made spaces);
    built once."""
    path = directory / f"rows-{mb:g}MB.txt"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        written = 0
        with open(part, "w", encoding="utf-8") as f:
            for text in parquet_texts(str(data)):
                line = text.replace("\n", " ") + "\n"
                size = len(line.encode("utf-8"))
                if written + size > mb * 1e6:
                    break
                f.write(line)
                written += size
        part.rename(path)
    return path


def command(tokenizer: Path, inputs: Path, out: Path, threads: int, *extra: str) -> dict:
    """`bpe encode` from start to exit: wall seconds, peak memory, ids written (from its summary)."""
    measured = run(
        python(
            "-m",
            "bpe.cli",
            "encode",
            str(tokenizer),
            str(inputs),
            "--out",
            str(out),
            "--force",
            "--threads",
            str(threads),
            *extra,
        )
    )
    summary = measured["stderr"].strip().splitlines()[-1]
    ids = int(summary.split(" -> ")[1].split(" tokens")[0].replace(",", ""))
    return {"seconds": measured["wall"], "ids": ids, "peak_mb": measured["peak_mb"], "summary": summary}


def median(runs: list[dict], key: str = "seconds") -> dict:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("run", help="(internal) time one encoder in this process; prints one JSON line")
    one.add_argument("encoder", choices=LIBRARY)
    one.add_argument("tokenizer")
    one.add_argument("data")
    one.add_argument("--threads", type=int, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer directory (default: trained once, kept in /tmp)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: the cores")
    parser.add_argument("--repeat", type=int, default=3, help="runs per encoder; the median is reported")
    parser.add_argument("--text-mb", type=float, default=40, help="size of the text file for `bpe encode FILE`")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    if args.command == "run":
        print(json.dumps(encode(args.encoder, args.tokenizer, args.data, args.threads)))
        return
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    cache = Path(tempfile.gettempdir()) / "bpe-bench-encode"
    tokenizer = args.tokenizer or cache / f"{args.pattern}-{args.vocab_size}"
    trained(args.data, args.vocab_size, args.pattern, tokenizer)
    text = text_file(args.data, args.text_mb, cache)
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-encode-"))
    env = {"RAYON_NUM_THREADS": str(args.threads)}
    runs: dict[str, list[dict]] = {name: [] for name in [*NAMES, "file-doc", "file-lines"]}
    try:
        for _ in range(args.repeat):  # interleaved, so that drifts in machine load hit every encoder
            for encoder in LIBRARY:
                measured = run(
                    python(
                        "-m",
                        "bench.encode",
                        "run",
                        encoder,
                        str(tokenizer),
                        str(args.data),
                        "--threads",
                        str(args.threads),
                    ),
                    env=env,
                )
                runs[encoder].append({**json.loads(measured["stdout"]), "peak_mb": measured["peak_mb"]})
            for name, suffix in (("cli-npy", "npy"), ("cli-txt", "txt")):
                runs[name].append(command(tokenizer, args.data, work / f"ids.{suffix}", args.threads))
            runs["file-doc"].append(command(tokenizer, text, work / "ids.npy", args.threads))
            lines = command(tokenizer, text, work / "ids.txt", args.threads, "--text-format", "lines")
            runs["file-lines"].append(lines)
        report(args, tokenizer, text, runs)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(args, tokenizer: Path, text: Path, runs: dict[str, list[dict]]) -> None:
    first = runs["tiktoken"][0]
    counts = {name: {r["ids"] for r in runs[name]} for name in NAMES}
    assert all(c == counts["tiktoken"] for c in counts.values()), f"encoders disagree on the number of ids: {counts}"
    mb = first["bytes"] / 1e6
    base = median(runs["tiktoken"])["seconds"]
    print(
        f"corpus {args.data}: {mb:,.1f} MB, {first['rows']:,} rows -> {first['ids']:,} ids; tokenizer {tokenizer} "
        f"({args.vocab_size:,}, {args.pattern}); {args.threads} thread(s); median of {args.repeat} "
        "interleaved run(s)"
    )
    print()
    print("| encoder | seconds | MB/s | M tokens/s | time / tiktoken | peak memory (MB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, label in NAMES.items():
        r = median(runs[name])
        print(
            f"| {label} | {r['seconds']:.2f} | {mb / r['seconds']:,.1f} | {first['ids'] / r['seconds'] / 1e6:.2f} | "
            f"{r['seconds'] / base:.2f}x | {r['peak_mb']:.0f} |"
        )
    print()
    print(f"`bpe encode` on {text} ({text.stat().st_size / 1e6:,.1f} MB of text, one row per line):")
    print()
    print("| command | seconds | MB/s | peak memory (MB) |")
    print("| --- | ---: | ---: | ---: |")
    size = text.stat().st_size / 1e6
    for name, label in (("file-doc", "one document -> ids.npy"), ("file-lines", "--text-format lines -> ids.txt")):
        r = median(runs[name])
        print(f"| {label} | {r['seconds']:.2f} | {size / r['seconds']:,.1f} | {r['peak_mb']:.0f} |")
    print()
    print("library encoders: the process holds the rows (read before timing); the commands read the Parquet files")
    print(f"last command summary: {runs['cli-npy'][-1]['summary']}")
    print(f"every time (s): { {k: [round(r['seconds'], 2) for r in v] for k, v in runs.items()} }")


if __name__ == "__main__":
    main()
