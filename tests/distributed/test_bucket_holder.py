"""A bucket holder's socket against hostile peers: whoever connects first (garbage, a wrong
secret, an idle socket, a header announcing gigabytes) neither kills the holder nor keeps the
driver out. The holder runs in this process, as it would in a Dask worker."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from bpe.distributed import channel
from bpe.distributed.bucket_holder import BucketHolder
from bpe.engine.pair_keys import pack
from bpe.training.counting import count_words

SECRET = "s3cret-of-this-run"


@pytest.fixture
def holder(tmp_path):
    holder = BucketHolder(count_words(["abab abab cab"], "whitespace"), str(tmp_path), 0, SECRET)
    yield holder
    holder.server.close()


def knock(holder: BucketHolder) -> socket.socket:
    address = holder.address()
    return socket.create_connection((address["host"], address["port"]), timeout=5)


def closed_by_the_holder(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with our bytes unread
        return True


def drive(holder: BucketHolder) -> dict[tuple[int, int], int]:
    """What the driver does: authenticate, get the initial counts, send a round, get its deltas."""
    sock = knock(holder)
    channel.send(sock, b"HELO", np.frombuffer(SECRET.encode(), np.uint8))
    kind, (keys, counts) = channel.receive(sock)
    assert kind == b"DLTA" and dict(zip(keys.tolist(), counts.tolist()))[pack(97, 98)] == 5
    channel.send(sock, b"MRGE", np.array([97, 98, 256], np.int64))
    kind, (keys, deltas) = channel.receive(sock)
    channel.send(sock, b"STOP")
    sock.close()
    return dict(zip(keys.tolist(), deltas.tolist()))


def test_the_driver_gets_in_after_garbage_a_wrong_secret_and_a_huge_header(holder):
    garbage = knock(holder)
    garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    wrong = knock(holder)
    channel.send(wrong, b"HELO", np.frombuffer(b"guess", np.uint8))
    huge = knock(holder)
    huge.sendall(channel.HEADER.pack(b"HELO", 1, 1 << 31))  # announces 2 GB, sends nothing more
    for sock in (garbage, wrong, huge):
        sock.settimeout(5)
        assert closed_by_the_holder(sock), "the holder should close a peer that did not prove itself"
    assert drive(holder)[pack(97, 98)] == -5


def test_an_idle_peer_does_not_hold_the_driver_up(holder):
    idle = knock(holder)  # connects first and says nothing
    started = time.monotonic()
    assert drive(holder)[pack(97, 98)] == -5
    assert time.monotonic() - started < 2
    idle.close()


def test_a_message_larger_than_allowed_is_refused_before_it_is_read():
    left, right = socket.socketpair()
    left.sendall(channel.HEADER.pack(b"HELO", 1, 1 << 31))
    right.settimeout(1)
    with pytest.raises(channel.ProtocolError, match="at most 4,096"):
        channel.receive(right, max_bytes=4096)
    left.sendall(channel.HEADER.pack(b"MRGE", 1, channel.ARRAY.size) + channel.ARRAY.pack(b"zz  ", 1))
    with pytest.raises(channel.ProtocolError):
        channel.receive(right)
    left.close()
    right.close()
