"""The worker side of the distributed merge loop: one word bucket (the words of one hash bucket),
or several (a multilingual run's hash bucket of each language), served over a socket.

A `BucketHolder` is a Dask actor. Dask places it (next to its words) and keeps it alive; the merge
loop itself runs over a plain TCP connection from the driver (`bpe.distributed.channel`):

    driver -> holder   HELO  the run's secret; the reply is DLTA with the bucket's initial counts
    driver -> holder   MRGE  merges of the round as (a, b, new id) triples
    holder -> driver   DLTA  pair keys and count deltas, only for pairs that changed (a holder of
                             several buckets: all of theirs one after the other, in the order it
                             was given, and a third array, where each bucket's end)
    driver -> holder   CHKP  write a checkpoint of the words after `n` merges (reply DONE)
    driver -> holder   STAT  reply with sizes and peak memory (JSON)
    driver -> holder   STOP  close

Until a peer has sent the secret it may send at most a few KB and take at most a few seconds;
peers that fail are dropped and the holder keeps listening until the driver is in.

The bucket's words are persisted in the scratch directory when the holder starts, and checkpoints
are written there on request, so a holder lost with its worker can be rebuilt elsewhere: load the
latest checkpoint and replay the rest of the merge log, discarding the deltas it produces (the
driver counted them already). The scratch directory is a path all workers share or an object
store URL (`s3://bucket/scratch`): a holder never reads a local file another process wrote.
"""

from __future__ import annotations

import io
import json
import logging
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Sequence

import numpy as np

from bpe import storage
from bpe.distributed import channel
from bpe.engine.cores import available_cores
from bpe.engine.count import WordCounts
from bpe.engine.merge import first_id
from bpe.engine.replay import BaseMerges
from bpe.engine.resident import READER, release_code, release_memory
from bpe.engine.table_group import TableGroup, join
from bpe.engine.word_slices import ThreadedWordTable, word_table
from bpe.engine.word_table import WordTable
from bpe.training.counting import counts_from_arrow, write_counts_parquet

HELLO_BYTES = 4096  # what a peer may send before it has shown it knows the secret
HELLO_SECONDS = 10.0  # how long it has to show it
ACCEPT_POLL_SECONDS = 0.005  # how often the holder looks for a driver heard while it waits for peers

logger = logging.getLogger(__name__)


def bucket_dir(scratch: str, bucket: int) -> str:
    return storage.join(scratch, f"bucket-{bucket:04d}")


def _worker_address() -> str | None:
    """The Dask worker this runs in (the driver's name for it), or None outside a worker."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def _worker_threads() -> int:
    """Threads this holder's word table may use: the Dask worker's (`--nthreads`), at most the
    cores this process may use; 1 outside a worker."""
    try:
        from distributed import get_worker

        return max(1, min(get_worker().state.nthreads, available_cores()))
    except (ImportError, ValueError, AttributeError):
        return 1


def peak_memory_mb() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would report the parent's in workers)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class HeldBucket:
    """One word bucket's words on this worker: its table, and its files in the scratch directory
    (the words, and the latest checkpoint) that a holder rebuilt elsewhere starts from."""

    def __init__(self, scratch: str, bucket: int, threads: int, base: BaseMerges | None) -> None:
        self.bucket = bucket
        self.threads = threads
        self.base = base
        self.directory = bucket_dir(scratch, bucket)
        self.words_path = storage.join(self.directory, "words.parquet")
        self.checkpoint_path = storage.join(self.directory, "checkpoint.npz")
        if not storage.is_remote(self.directory):
            os.makedirs(storage.local_path(self.directory), exist_ok=True)
        self.restored_from = "its words"
        self.table: WordTable | ThreadedWordTable | None = None

    def start(self, counts: WordCounts | str) -> tuple[np.ndarray, np.ndarray]:
        """Hold `counts` (or the words of the Parquet file at that path), persisted first; returns
        the initial pair counts."""
        if isinstance(counts, str):
            counts = self._link_words(counts)
        else:
            self._write_words(counts)
        # A fresh start: whatever an earlier holder left here is not this bucket's state.
        storage.remove(self.checkpoint_path)
        self.table = word_table(counts, self.threads, self.base)
        return self.table.take_deltas()

    def _link_words(self, path: str) -> WordCounts:
        """Use a Parquet file that already holds the bucket's words (the pipeline writes one): link
        it as this bucket's words (a copy within the object store, or on a filesystem without
        symbolic links), replacing whatever an earlier holder linked or wrote there."""
        from bpe.distributed.count_tasks import read_counts

        counts = read_counts(path)
        if storage.is_remote(self.directory) or storage.is_remote(path):
            storage.copy(path, self.words_path)
            return counts
        link, tmp = self.words_path, f"{self.words_path}.{os.getpid()}.link"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(os.path.abspath(storage.local_path(path)), tmp)
            os.replace(tmp, link)
        except OSError:  # no symbolic links here: keep a copy
            self._write_words(counts)
        return counts

    def _write_words(self, counts: WordCounts) -> None:
        storage.write_file(self.words_path, lambda tmp: write_counts_parquet(counts, tmp))

    def checkpoint(self, merges_applied: int) -> None:
        """Write the words as they stand after `merges_applied` merges, whole or not at all (see
        `bpe.storage.write_file`)."""
        tokens, lengths, freqs = self.table.to_words()

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, tokens=tokens, lengths=lengths, freqs=freqs, merges=np.array([merges_applied]))

        storage.write_file(self.checkpoint_path, write)

    def _load_checkpoint(self, limit: int) -> tuple[WordTable | ThreadedWordTable, int] | None:
        """The table and merge count of the checkpoint, or None when there is none or it cannot be
        trusted (truncated, corrupted, inconsistent, or ahead of the `limit` merges of the log)."""
        path = self.checkpoint_path
        if not storage.exists(path):
            return None
        try:
            with np.load(io.BytesIO(storage.read_bytes(path))) as saved:
                tokens, lengths, freqs = saved["tokens"], saved["lengths"], saved["freqs"]
                done = int(saved["merges"][0])
            if done > limit:
                raise ValueError(f"it is ahead of the merge log ({done:,} > {limit:,} merges)")
            if len(lengths) != len(freqs) or int(lengths.sum()) != len(tokens) or (lengths < 1).any():
                raise ValueError("its arrays do not agree")
            if len(tokens) and (tokens.min() < 0 or tokens.max() >= first_id(self.base) + done):
                raise ValueError("it holds token ids its merges cannot have made")
            table = (
                ThreadedWordTable.from_words(tokens, lengths, freqs, self.threads)
                if self.threads > 1
                else WordTable.from_words(tokens, lengths, freqs)
            )
        except Exception as exc:  # BadZipFile, EOFError, a bad CRC, a missing array...: the words are always right
            reason = (str(exc).strip().splitlines() or [""])[0]
            self.restored_from = f"its words (checkpoint.npz unusable: {type(exc).__name__}: {reason})"
            logger.warning(
                f"bucket {self.bucket}: {path} unusable ({type(exc).__name__}: {reason}); "
                "rebuilding from words.parquet and the whole merge log"
            )
            return None
        self.restored_from = f"its checkpoint after {done:,} merges"
        return table, done

    def restore(self, merge_log: np.ndarray) -> None:
        """Hold the bucket's words after `merge_log`: the latest checkpoint, or the bucket's words
        when it has none or it is unreadable, then the rest of the log replayed."""
        loaded = self._load_checkpoint(len(merge_log))
        if loaded is not None:
            table, done = loaded
        else:
            import pyarrow.parquet as pq

            if not storage.exists(self.words_path):
                raise FileNotFoundError(
                    f"{self.words_path}: the bucket's words are gone; the scratch directory must be shared by all "
                    "workers (a shared filesystem, or object storage such as s3://bucket/scratch)"
                )
            with storage.open_read(self.words_path) as f:
                table = word_table(counts_from_arrow(pq.read_table(f)), self.threads, self.base)
            table.take_deltas()
            done = 0
        table.apply(merge_log[done:])
        table.take_deltas()  # the driver counted these already
        self.table = table

    def close(self) -> None:
        if isinstance(self.table, ThreadedWordTable):
            self.table.close()


class BucketHolder:
    """Holds one word bucket, or several (a multilingual run's hash bucket of each language), on a
    Dask worker and serves the merge loop: every round is applied to each of its buckets, and the
    reply holds each bucket's deltas in turn (two arrays per bucket, in the order given)."""

    def __init__(
        self,
        counts: WordCounts | str | Sequence[WordCounts | str] | None,
        scratch: str,
        bucket: int | Sequence[int],
        secret: str,
        merge_log: np.ndarray | None = None,
        base: BaseMerges | None = None,
    ) -> None:
        """`counts` is the bucket's words (written to the scratch directory), the path of a Parquet
        file that already holds them, or None to rebuild from the scratch directory + `merge_log`;
        for several buckets (`bucket` a list), one such per bucket. `base`: a tokenizer's merges,
        replayed on the words before the loop's (`merge_log` holds only the loop's)."""
        started = time.perf_counter()
        buckets = [bucket] if isinstance(bucket, int) else list(bucket)
        if counts is not None and isinstance(bucket, int):
            counts = [counts]
        self.bucket = bucket
        self.base = base
        self.secret = secret
        self.merges_applied = 0
        self.worker = _worker_address()
        self.threads = _worker_threads()
        self.parts = [HeldBucket(scratch, b, self.threads, base) for b in buckets]
        if counts is not None:
            initial = [part.start(words) for part, words in zip(self.parts, counts, strict=True)]
        else:
            merge_log = merge_log if merge_log is not None else np.zeros((0, 3), np.int64)
            for part in self.parts:
                part.restore(merge_log)
            self.merges_applied = len(merge_log)
            initial = [(np.zeros(0, np.int64), np.zeros(0, np.int64)) for _ in self.parts]
        self.initial = self._reply(initial)
        del counts, initial
        release_memory()  # what building the tables freed (the counts, the arrays they were built from)
        release_code(READER)  # and Arrow's code: the loop reads no file
        # Several buckets on one thread each take a round in one compiled call (`TableGroup`).
        tables = [part.table for part in self.parts]
        self.group = TableGroup(tables) if len(tables) > 1 and all(type(t) is WordTable for t in tables) else None
        self.build_seconds = time.perf_counter() - started
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind((self._host(), 0))
        self.server.listen(16)
        self.thread = threading.Thread(target=self._serve, name=f"bpe-bucket-{buckets[0]}", daemon=True)
        self.thread.start()

    @property
    def table(self) -> WordTable | ThreadedWordTable:
        """The table of the (first) bucket held."""
        return self.parts[0].table

    @property
    def restored_from(self) -> str:
        """Where the buckets' words came from: their words, or a checkpoint (see `HeldBucket`)."""
        if len(self.parts) == 1:
            return self.parts[0].restored_from
        return "; ".join(f"bucket {part.bucket} from {part.restored_from}" for part in self.parts)

    # -- called through Dask -----------------------------------------------------------------

    def address(self) -> dict:
        host, port = self.server.getsockname()
        return {
            "host": host,
            "port": port,
            "pid": os.getpid(),
            "worker": self.worker,
            "restored_from": self.restored_from,
            "build_seconds": self.build_seconds,
        }

    def _checkpoint(self) -> None:
        """Checkpoint every bucket held, after `merges_applied` merges."""
        self._sync()
        for part in self.parts:
            part.checkpoint(self.merges_applied)

    def _round(self, merges: np.ndarray) -> list[np.ndarray]:
        """Apply a round's merges to every bucket held; their deltas as the reply holds them."""
        if self.group is not None:
            self.merges_applied += len(merges)
            return list(self.group.apply_and_take(merges))
        deltas = []
        for part in self.parts:
            part.table.apply(merges)
            deltas.append(part.table.take_deltas())
        self.merges_applied += len(merges)
        return self._reply(deltas)

    def _reply(self, deltas: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """The arrays of a DLTA reply: one bucket's keys and deltas; several buckets' joined, with
        where each ends (`table_group.join`: three arrays, however many buckets)."""
        return list(deltas[0]) if len(deltas) == 1 and isinstance(self.bucket, int) else list(join(deltas))

    def _sync(self) -> None:
        """Bring the tables a `TableGroup` applies rounds to up to date, before reading them."""
        if self.group is not None:
            self.group.sync()

    # -- the loop ----------------------------------------------------------------------------

    @staticmethod
    def _host() -> str:
        try:
            from distributed import get_worker

            address = get_worker().address
            return address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
        except (ImportError, ValueError):
            return "127.0.0.1"

    def _wait_for_driver(self, wait: float = 600.0) -> socket.socket | None:
        """Accept connections until one proves it is the driver: a HELO holding the secret, within
        HELLO_BYTES and HELLO_SECONDS. Each peer is heard on a thread of its own, so garbage, a
        wrong secret or an idle socket is closed without holding up the driver; the holder keeps
        listening until the driver is in (or `wait` seconds pass)."""
        authenticated: queue.Queue = queue.Queue()

        def hear(conn: socket.socket) -> None:
            try:
                conn.settimeout(HELLO_SECONDS)
                kind, arrays = channel.receive(conn, max_bytes=HELLO_BYTES)
                if kind == b"HELO" and len(arrays) == 1:
                    if secrets.compare_digest(arrays[0].tobytes(), self.secret.encode()):
                        conn.settimeout(None)
                        authenticated.put(conn)
                        return
            except (ConnectionError, TimeoutError, OSError):
                pass
            conn.close()

        try:
            # Short: the driver, once heard on its own thread, is taken up at the next poll (a run
            # starts every holder and connects to each in turn, so each poll's wait adds up).
            self.server.settimeout(ACCEPT_POLL_SECONDS)
        except OSError:  # closed before this thread got here (the holder was stopped)
            return None
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                return authenticated.get_nowait()
            except queue.Empty:
                pass
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return None
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=hear, args=(conn,), name=f"bpe-bucket-{self.parts[0].bucket}-hello", daemon=True
            ).start()
        return None

    def _serve(self) -> None:
        conn = self._wait_for_driver()
        if conn is None:
            self.server.close()
            return
        try:
            channel.send(conn, b"DLTA", *self.initial)
            self.initial = None
            while True:
                kind, arrays = channel.receive(conn)
                if kind == b"MRGE":
                    channel.send(conn, b"DLTA", *self._round(arrays[0].reshape(-1, 3)))
                elif kind == b"CHKP":
                    self._checkpoint()
                    channel.send(conn, b"DONE")
                elif kind == b"STAT":
                    self._sync()
                    tables = [part.table for part in self.parts]
                    stats = {
                        "bucket": self.bucket,
                        "words": sum(table.n_words for table in tables),
                        "tokens": sum(table.token_count() for table in tables),
                        "table_mb": sum(table.nbytes for table in tables) / 1e6,
                        "threads": self.threads,
                        "peak_mb": peak_memory_mb(),
                        "merges_applied": self.merges_applied,
                    }
                    channel.send(conn, b"JSON", np.frombuffer(json.dumps(stats).encode(), np.uint8))
                else:  # STOP, or anything unexpected
                    return
        except (channel.ChannelClosed, TimeoutError, OSError):
            return
        finally:
            conn.close()
            self.server.close()
            for part in self.parts:
                part.close()
