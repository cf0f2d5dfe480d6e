"""Benchmark: superword tokenizers (SuperBPE) against plain BPE, on the pipeline's held-out rows.

    python -m bench.superwords [--data ../shared/corpora/en] [--sizes 32768,65536] [--transitions 0.5,0.7,0.85]
    python -m bench.superwords --scale 500 --sizes 32768 --transitions 0.7 --engine dask   # at scale

The rows the pipeline holds out for its evaluation set (`holdout_fraction` 0.01, the same hash:
`bpe.training.counting.holdout_mask`) are set aside; every tokenizer trains on the others, as `bpe train`
in a process of its own (wall time and peak memory of its process tree: bench/measure.py), and is
measured on the held-out rows with the pipeline's `bytes_per_token`. Transitions are fractions of
the vocabulary size (0.7 at 32,768: the superword stage starts at 22,938 tokens). Hugging Face
`tokenizers` trained on the superword split alone (the paper's recipe has no stage-1 replay in
stock `tokenizers`) runs beside, for its time and memory on the same pieces.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.measure import REPO, bpe_train, python, run
from bench.scale_corpus import scaled_corpus

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"
HOLDOUT_FRACTION = 0.01  # the pipeline's default (bpe.pipeline.config)


def split_rows(data: Path, work: Path) -> tuple[Path, Path]:
    """Write the corpus less its held-out rows (train.parquet) and the held-out rows
    (held-out.parquet) into `work`. Run in a process of its own (`--split`): a process's peak
    memory carries over to the processes it starts, so the measuring process never holds the data."""
    from bpe.inputs.discover import discover
    from bpe.training.counting import holdout_mask

    kept, held_out = [], []
    for shard in discover([str(data)]):
        column = pq.read_table(shard.path, columns=["text"]).column("text").combine_chunks().drop_null()
        mask = holdout_mask(column.cast(pa.large_string()), HOLDOUT_FRACTION).tolist()
        texts = column.to_pylist()
        held_out += [t for t, out in zip(texts, mask) if out]
        kept += [t for t, out in zip(texts, mask) if not out]
    train_path, held_out_path = work / "train.parquet", work / "held-out.parquet"
    pq.write_table(pa.table({"text": pa.array(kept, pa.large_string())}), train_path, row_group_size=20_000)
    pq.write_table(pa.table({"text": pa.array(held_out, pa.large_string())}), held_out_path)
    return train_path, held_out_path


def curve_of(tokenizer: Path, held_out: Path) -> dict:
    """Bytes per token on the held-out rows at the tokenizer's size and at every power of two below
    it (and at its transition), as the pipeline's evaluation measures them (`--curve`, a process of
    its own as well)."""
    from bpe import Tokenizer
    from bpe.pipeline.evaluate import compression_curve, default_sizes

    texts = pq.read_table(held_out).column("text").to_pylist()
    tok = Tokenizer.load(tokenizer)
    transition = tok.manifest.superwords.transition if tok.manifest.superwords is not None else None
    sizes = sorted(set(default_sizes(tok.vocab_size)) | ({transition} if transition else set()))
    return {
        "rows": len(texts),
        "bytes": sum(len(t.encode()) for t in texts),
        "curve": compression_curve(tok, texts, sizes),
    }


def on_engine(engine: str) -> list[str]:
    """The flags that run `bpe train` on `engine` (the Dask engine on 2 local workers)."""
    return ["--engine", "dask", "--workers", "2"] if engine == "dask" else []


def measured(result: dict, out: Path, held_out: Path) -> dict:
    """The run's manifest, and its curve on the held-out rows (`curve_of`, in a process of its own)."""
    result["manifest"] = json.loads((out / "manifest.json").read_text())
    measure = run(python("-m", "bench.superwords", "--curve", str(out), str(held_out)))
    result["curve"] = json.loads(measure["stdout"])["curve"]
    result["bytes_per_token"] = result["curve"][-1]["bytes_per_token"]
    return result


def plot_comparison(path: Path, rows: list[dict], title: str) -> None:
    """Bytes per token on the held-out rows by vocabulary size: plain BPE and each superword
    tokenizer of the largest size (its transition marked), as the pipeline's plot draws a curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(r["size"] for r in rows)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100)
    for r in rows:
        if r["size"] != size or r["transition"] == "hf":
            continue
        label = "BPE" if r["transition"] is None else f"SuperBPE, t = {r['transition']:,}"
        line = ax.plot([c["vocab_size"] for c in r["curve"]], [c["bytes_per_token"] for c in r["curve"]], "o-", ms=3)
        line[0].set_label(label)
        if r["transition"] is not None:
            ax.axvline(r["transition"], color=line[0].get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("vocabulary size (tokens)")
    ax.set_ylabel("bytes per token on held-out text (higher is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="32768,65536", help="vocabulary sizes, comma-separated")
    parser.add_argument("--transitions", default="0.5,0.7,0.85", help="fractions of each size where superwords start")
    parser.add_argument("--engine", choices=("local", "dask"), default="local")
    parser.add_argument("--no-hf", action="store_true", help="skip Hugging Face on the superword split")
    parser.add_argument("--scale", type=float, help="build a corpus of this many MB from --data, and use it")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--plot", type=Path, help="draw the curves of the largest size here (PNG)")
    parser.add_argument("--split", nargs=2, metavar=("DATA", "WORK"), help=argparse.SUPPRESS)
    parser.add_argument("--curve", nargs=2, metavar=("TOKENIZER", "HELD_OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split:
        split_rows(Path(args.split[0]), Path(args.split[1]))
        return
    if args.curve:
        print(json.dumps(curve_of(Path(args.curve[0]), Path(args.curve[1]))))
        return
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    if args.scale:
        args.data = scaled_corpus(args.data, args.scale)
    sizes = [int(s) for s in args.sizes.split(",")]
    fractions = [float(f) for f in args.transitions.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-superwords-"))
    try:
        run(python("-m", "bench.superwords", "--split", str(args.data), str(work)))
        data, held_out = work / "train.parquet", work / "held-out.parquet"
        print(
            f"corpus {args.data}: {data.stat().st_size / 1e6:,.0f} MB on disk to train on; held out (the "
            f"pipeline's evaluation rows at {HOLDOUT_FRACTION}): {pq.read_metadata(held_out).num_rows:,} rows; "
            f"engine {args.engine}",
            flush=True,
        )
        warm = [*on_engine(args.engine), "--superwords", "--transition", "280"]
        run(bpe_train(data, 300, work / "warm", *warm))  # compile once, outside the timing
        rows = []
        for size in sizes:
            out = work / f"bpe-{size}"
            rows.append(
                {
                    "size": size,
                    "transition": None,
                    **measured(run(bpe_train(data, size, out, *on_engine(args.engine))), out, held_out),
                }
            )
            print(row_line(rows[-1]), flush=True)
            for fraction in fractions:
                transition = round(size * fraction)
                out = work / f"superbpe-{size}-{transition}"
                extra = ("--superwords", "--transition", str(transition))
                result = measured(run(bpe_train(data, size, out, *on_engine(args.engine), *extra)), out, held_out)
                rows.append({"size": size, "transition": transition, **result})
                print(row_line(rows[-1]), flush=True)
            if not args.no_hf:
                hf = run(
                    python("-m", "bench.peers", "hf", str(data), "--vocab-size", str(size), "--pattern", "superbpe")
                )
                rows.append({"size": size, "transition": "hf", **hf})
                print(
                    f"  Hugging Face on the superword split alone: {hf['wall']:.1f} s, {hf['peak_mb']:,.0f} MB",
                    flush=True,
                )
        report(rows)
        if args.plot:
            plot_comparison(args.plot, rows, f"{args.data.name}: bytes per token on the pipeline's held-out rows")
            print(f"plot: {args.plot}")
        if args.json:
            keep = ("size", "transition", "wall", "peak_mb", "largest_process_mb", "bytes_per_token", "curve")
            args.json.write_text(json.dumps([{k: r.get(k) for k in keep} for r in rows], indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def row_line(row: dict) -> str:
    m = row["manifest"]
    what = "BPE" if row["transition"] is None else f"SuperBPE t={row['transition']:,}"
    engine = m["engine"]
    holders = f"; word bucket holders' peaks {engine['bucket_peak_mb']} MB" if engine.get("bucket_peak_mb") else ""
    return (
        f"  {row['size']:,} {what}: {row['bytes_per_token']:.3f} bytes/token held out, {row['wall']:.1f} s, "
        f"{row['peak_mb']:,.0f} MB (largest process {row['largest_process_mb']:,.0f} MB{holders}), "
        f"{m['counts']['unique_words']:,} unique pieces"
    )


def report(rows: list[dict]) -> None:
    """One table: bytes per token held out (and against BPE of the same size), pieces, memory, time."""
    print()
    columns = "vocabulary | tokenizer | bytes/token (held out) | vs BPE | unique pieces, stage 1 / stage 2"
    print(f"| {columns} | peak memory (MB) | wall (s) |")
    print("| ---: | --- | ---: | ---: | --- | ---: | ---: |")
    plain = {r["size"]: r for r in rows if r["transition"] is None}
    for r in rows:
        if r["transition"] == "hf":
            print(
                f"| {r['size']:,} | Hugging Face, superword split alone | | | | {r['peak_mb']:,.0f} | {r['wall']:.1f} |"
            )
            continue
        m, base = r["manifest"], plain[r["size"]]
        if r["transition"] is None:
            name, pieces = "BPE", f"{m['counts']['unique_words']:,}"
        else:
            first, second = m["superwords"]["stages"]
            name, pieces = (
                f"SuperBPE, t = {r['transition']:,}",
                f"{first['unique_words']:,} / {second['unique_words']:,}",
            )
        ratio = r["bytes_per_token"] / base["bytes_per_token"]
        print(
            f"| {r['size']:,} | {name} | {r['bytes_per_token']:.3f} | {ratio:.3f}x "
            f"| {pieces} | {r['peak_mb']:,.0f} | {r['wall']:.1f} |"
        )


if __name__ == "__main__":
    main()
