"""The pipeline's `base:` key: a scheduled deployment extends a fixed base tokenizer with the
merges of its own data, and the version's manifest records the base (where it came from, its
digest). Real services: the session's Prefect server, process worker and Dask cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bpe import Tokenizer, train
from bpe.extend import Base
from bpe.pipeline.store import VersionStore
from tests.conftest import claim_deployment_names, stdlib_paragraphs
from tests.test_pipeline import POOL, run_deployment, write_shard

pytestmark = pytest.mark.services  # starts real services: the slow tier

REPO = Path(__file__).resolve().parent.parent


def test_a_deployment_with_a_base_extends_it_and_records_it(pipeline_services, tmp_path):
    yaml = pytest.importorskip("yaml")
    claim_deployment_names(__name__, "extended")
    paragraphs = stdlib_paragraphs()
    base = train(paragraphs[3000:3600], vocab_size=400, pattern="gpt2", special_tokens=["<|endoftext|>"])
    base.save(tmp_path / "base")
    data = tmp_path / "shards"
    for i in range(2):
        write_shard(data / f"part-{i:05d}.parquet", paragraphs[i * 600 : (i + 1) * 600])
    cfg = {
        "name": "extended",
        "data": str(data),
        "vocab_size": 520,
        "base": str(tmp_path / "base"),
        "holdout_fraction": 0.05,
        "artifact_root": str(tmp_path / "artifacts"),
        "dask_scheduler": pipeline_services["scheduler"],
        "schedule": "17 4 * * *",
    }
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "extended.yaml").write_text(yaml.safe_dump(cfg))
    done = subprocess.run(
        [str(Path(os.sys.executable).parent / "bpe"), "deploy", "--conf", str(conf), "--pool", POOL],
        env={**os.environ, **pipeline_services["env"]},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = run_deployment(pipeline_services, "extended")
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    store = VersionStore(cfg["artifact_root"], "extended")
    manifest = store.manifest("v0001")
    assert manifest["base"]["source"] == str(tmp_path / "base")
    assert manifest["base"]["sha256"] == Base(Tokenizer.load(tmp_path / "base"), "").digest
    assert manifest["settings"]["base_merges"] == 143 and manifest["result"]["new_merges"] == 120
    tok = Tokenizer.load(store.location("v0001"))
    assert tok.vocab_size == 520 and tok.pattern == "gpt2"  # the base's pattern: the configuration names none
    assert tok.merges[:143] == base.merges and tok.special_tokens == {"<|endoftext|>": 399}
    assert [tok.token_bytes(i) for i in range(399)] == [base.token_bytes(i) for i in range(399)]
