"""Benchmark: multilingual training on the shared UD corpora (18 languages), judged on the NTREX
parallel dev set: plain BPE, a temperature mixture, and parity-aware training (base, window, and
global merges first: 10% of the merges, or the fractions `--global-fractions` gives), against
Hugging Face's `ParityBpeTrainer` and `BpeTrainer` on the same data, split the same way, in the
same run (`--no-peers`: ours alone).

    python -m bench.parity [--ud ../shared/corpora/ud] [--dev ../shared/corpora/ntrex]
                           [--sizes 8192,32768] [--hf-parity-sizes 8192] [--pattern gpt2]
                           [--global-fractions 0.1] [--no-peers]

Per run: the Gini coefficient of the languages' token counts on NTREX (0: every language costs the
same tokens for the same sentences), the mean and the worst language's bytes per token, bytes per
token over all of NTREX, wall time and peak memory of the whole process (bench/measure.py). Our
kernels are compiled once before timing. `ParityBpeTrainer` is slow (minutes at 32,768), so by
default it runs at the first size only; `--hf-parity-sizes` chooses. Then, per size, two tables by
language for our runs: the merges that served each language (parity-aware runs: the manifest's
`languages.by_language.<code>.merges`), and its tokens per NTREX sentence, against plain BPE's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.measure import REPO, python, run

SHARED = REPO.parent / "shared" / "corpora"


def our_command(ud: Path, vocab_size: int, out: Path, pattern: str, *extra: str) -> list[str]:
    """`bpe train` on one Parquet file per language of `ud`."""
    languages = [f"{p.stem}={p}" for p in sorted(ud.glob("*.parquet"))]
    flags = [arg for code in languages for arg in ("--lang", code)]
    return python(
        "-m", "bpe.cli", "train", *flags, "--vocab-size", str(vocab_size), "--pattern", pattern,
        "--out", str(out), "--force", "--quiet", *extra,
    )  # fmt: skip


def peer_command(trainer: str, ud: Path, dev: Path, vocab_size: int, pattern: str, out: Path, *extra: str) -> list[str]:
    return python(
        "-m", "bench.peers", trainer, str(ud), "--dev", str(dev), "--vocab-size", str(vocab_size),
        "--pattern", pattern, "--out", str(out), *extra,
    )  # fmt: skip


def figures(tokenizer: Path, dev: Path) -> dict:
    """Gini, mean and worst language's bytes per token, overall bytes per token on `dev`, and each
    language's tokens per sentence and (a parity-aware run of ours) the merges that served it."""
    import bpe

    result = bpe.evaluate({"t": str(tokenizer)}, str(dev), pivot="eng")["t"]
    per_language = {code: row.bytes_per_token for code, row in result.languages.items()}
    worst = min(per_language, key=per_language.get)
    served, global_made = merges_served(tokenizer)
    return {
        "gini": result.gini,
        "mean_bpt": sum(per_language.values()) / len(per_language),
        "worst": worst,
        "worst_bpt": per_language[worst],
        "worst_tokens": result.languages[worst].tokens,
        "global_bpt": result.bytes_per_token,
        "languages": {
            code: {"tokens_per_sentence": row.tokens_per_sentence, "merges": served.get(code)}
            for code, row in result.languages.items()
        },
        "global_merges_made": global_made,
    }


def merges_served(tokenizer: Path) -> tuple[dict[str, int], int | None]:
    """The merges that served each language, and the global ones, as our manifest records them
    for a parity-aware run (nothing for another run, or a peer's file)."""
    manifest = tokenizer / "manifest.json"
    if not manifest.is_file():
        return {}, None
    languages = json.loads(manifest.read_text()).get("languages") or {}
    served = {code: entry["merges"] for code, entry in languages.get("by_language", {}).items() if "merges" in entry}
    return served, (languages.get("parity") or {}).get("global_merges_made")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ud", type=Path, default=SHARED / "ud")
    parser.add_argument("--dev", type=Path, default=SHARED / "ntrex")
    parser.add_argument("--sizes", default="8192,32768")
    parser.add_argument(
        "--hf-parity-sizes", default=None, help="sizes at which ParityBpeTrainer runs (default: the first)"
    )
    parser.add_argument("--pattern", default="gpt2")
    parser.add_argument(
        "--global-fractions", default="0.1", help="parity runs with this fraction of the merges made globally first"
    )
    parser.add_argument("--no-peers", action="store_true", help="our runs only, without Hugging Face's trainers")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    for path in (args.ud, args.dev):
        if not path.exists():
            sys.exit(f"no corpus at {path} (give --ud and --dev)")
    sizes = [int(s) for s in args.sizes.split(",")]
    hf_sizes = [int(s) for s in args.hf_parity_sizes.split(",")] if args.hf_parity_sizes else sizes[:1]
    fractions = [float(f) for f in args.global_fractions.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-parity-"))
    results: list[dict] = []
    try:
        run(our_command(args.ud, 300, work / "warm", args.pattern))  # compile once, outside the timing
        run(our_command(args.ud, 300, work / "warm", args.pattern, "--parity-dev", str(args.dev)))
        for size in sizes:
            merges = size - 256
            ours = {
                "plain BPE": (),
                "mixture, temperature 0.3": ("--mix", "temperature=0.3"),
                "parity-aware, base": ("--parity-dev", str(args.dev)),
                "parity-aware, window": ("--parity-dev", str(args.dev), "--parity-variant", "window"),
            }
            for fraction in fractions:
                n = int(merges * fraction)
                ours[f"parity-aware, base, {fraction:.1%} global merges ({n:,})"] = (
                    "--parity-dev", str(args.dev), "--global-merges", str(n),
                )  # fmt: skip
            for name, extra in ours.items():
                out = work / f"ours-{size}"
                measured = run(our_command(args.ud, size, out, args.pattern, *extra))
                results.append(
                    {"size": size, "trainer": f"bpe train: {name}", **keep(measured), **figures(out, args.dev)}
                )
                shutil.rmtree(out, ignore_errors=True)
            peers = [] if args.no_peers else [("Hugging Face BpeTrainer (plain)", "hf-plain", ())]
            if size in hf_sizes and not args.no_peers:
                peers.append(("Hugging Face ParityBpeTrainer, base", "hf-parity", ()))
            for name, trainer, extra in peers:
                out = work / f"{trainer}-{size}.json"
                measured = run(peer_command(trainer, args.ud, args.dev, size, args.pattern, out, *extra))
                results.append({"size": size, "trainer": name, **keep(measured), **figures(out, args.dev)})
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        report(args, results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def keep(measured: dict) -> dict:
    return {"wall": measured["wall"], "peak_mb": measured["peak_mb"]}


def report(args, results: list[dict]) -> None:
    print(f"training: {args.ud} (one Parquet file per language); judged on {args.dev}; pattern {args.pattern}")
    for size in sorted({r["size"] for r in results}):
        rows = [r for r in results if r["size"] == size]
        plain = next(r for r in rows if r["trainer"] == "bpe train: plain BPE")
        hf_parity = next((r for r in rows if "ParityBpeTrainer" in r["trainer"]), None)
        print(f"\nvocabulary {size:,}")
        print(
            "| trainer | NTREX Gini | vs plain | mean bytes/token | worst language (bytes/token) | "
            "bytes/token overall | wall (s) | peak (MB) | wall / our plain | wall / HF parity |"
        )
        print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            vs_hf = f"{r['wall'] / hf_parity['wall']:.3f}x" if hf_parity else ""
            print(
                f"| {r['trainer']} | {r['gini']:.4f} | {r['gini'] / plain['gini'] - 1:+.0%} | {r['mean_bpt']:.3f} | "
                f"{r['worst']} ({r['worst_bpt']:.3f}) | {r['global_bpt']:.3f} | {r['wall']:.2f} | "
                f"{r['peak_mb']:.0f} | {r['wall'] / plain['wall']:.2f}x | {vs_hf} |"
            )
        by_language(rows, plain)


def by_language(rows: list[dict], plain: dict) -> None:
    """Two tables by language for our runs at one size: the merges that served each language in the
    parity-aware runs (and the global ones), and tokens per NTREX sentence against plain BPE's."""
    ours = [r for r in rows if r["trainer"].startswith("bpe train: ")]
    parity = [r for r in ours if r["global_merges_made"] is not None]
    names = {id(r): r["trainer"].removeprefix("bpe train: ") for r in ours}
    codes = list(plain["languages"])
    print("\nmerges that served each language")
    print("| language | " + " | ".join(names[id(r)] for r in parity) + " |")
    print("| --- |" + " ---: |" * len(parity))
    for code in codes:
        print(f"| {code} | " + " | ".join(f"{r['languages'][code]['merges']:,}" for r in parity) + " |")
    print("| (global) | " + " | ".join(f"{r['global_merges_made']:,}" for r in parity) + " |")
    print("\ntokens per NTREX sentence (against plain BPE)")
    print("| language | " + " | ".join(names[id(r)] for r in ours) + " |")
    print("| --- |" + " ---: |" * len(ours))
    for code in codes:
        base = plain["languages"][code]["tokens_per_sentence"]
        cells = []
        for r in ours:
            value = r["languages"][code]["tokens_per_sentence"]
            cells.append(f"{value:.1f}" if r is plain else f"{value:.1f} ({value / base - 1:+.0%})")
        print(f"| {code} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
