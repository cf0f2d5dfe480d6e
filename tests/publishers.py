"""What tests/pipeline/test_store.py's concurrency tests run in processes of their own (multiprocessing's
spawn): publishing to a version store, and dying half-way. A module that imports only the store,
so that each process starts in a fifth of the time it takes to import the test module (pytest, its
fixtures, their imports) for them."""

from __future__ import annotations

import json
import os
import signal

from bpe.pipeline.store import VersionStore


def publish(root: str, name: str = "tok", payload: str = "x") -> str:
    store = VersionStore(root, name)
    staged = store.stage()
    (staged.directory / "manifest.json").write_text(json.dumps({"payload": payload, "created": "now"}))
    store.commit(staged)
    return staged.version


def stage_and_commit(root: str, queue) -> None:
    queue.put(publish(root, payload=str(os.getpid())))


def publish_many(root: str, count: int, queue) -> None:
    for _ in range(count):
        queue.put(publish(root, payload=str(os.getpid())))


def stage_then_die(root: str) -> None:
    VersionStore(root, "tok").stage()
    os.kill(os.getpid(), signal.SIGKILL)  # killed between stage and commit
