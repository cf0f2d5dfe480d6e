"""A tight request/reply channel for the distributed merge loop: numpy arrays over one TCP socket.

Dask places the word buckets and starts their holders; the merge loop then talks to each holder
over a plain socket, as LightGBM and XGBoost do, because a Dask call costs about a millisecond
and a socket round trip tens of microseconds.

A message is a 16-byte header (kind, number of arrays, payload length) followed by the arrays,
each as a 16-byte header (dtype code, element count) and its raw bytes.
"""

from __future__ import annotations

import socket
import struct

import numpy as np

HEADER = struct.Struct("<4sIQ")
ARRAY = struct.Struct("<4sQ")
DTYPES = {b"i8  ": np.dtype("<i8"), b"u1  ": np.dtype("u1"), b"i4  ": np.dtype("<i4")}
CODES = {v: k for k, v in DTYPES.items()}


class ChannelClosed(ConnectionError):
    """The other end went away (its process died, or it closed the connection)."""


class ProtocolError(ConnectionError):
    """The other end sent something that is not a message of this channel, or a larger one than
    the receiver accepts at this point (a peer that has not authenticated yet gets a few KB)."""


def send(sock: socket.socket, kind: bytes, *arrays: np.ndarray) -> None:
    """Send one message: `kind` (4 bytes) and any number of 1-D arrays of int64, int32 or uint8."""
    parts = []
    size = 0
    for array in arrays:
        array = np.ascontiguousarray(array)
        head = ARRAY.pack(CODES[array.dtype], array.size)
        parts.append(head)
        parts.append(memoryview(array).cast("B"))
        size += len(head) + array.nbytes
    try:
        sock.sendall(HEADER.pack(kind, len(arrays), size) + b"".join(parts))
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(str(exc)) from None


def receive(sock: socket.socket, max_bytes: int | None = None) -> tuple[bytes, list[np.ndarray]]:
    """Receive one message: (kind, arrays). Raises ChannelClosed when the peer is gone,
    TimeoutError when the socket's timeout passes first, and ProtocolError for a malformed message
    or one whose payload exceeds `max_bytes` (checked before anything is allocated)."""
    kind, count, size = HEADER.unpack(_read_exactly(sock, HEADER.size))
    if max_bytes is not None and size > max_bytes:
        raise ProtocolError(f"a {size:,}-byte message where at most {max_bytes:,} are accepted")
    payload = _read_exactly(sock, size)
    arrays = []
    offset = 0
    for _ in range(count):
        if offset + ARRAY.size > size:
            raise ProtocolError("message shorter than its array headers")
        code, n = ARRAY.unpack_from(payload, offset)
        offset += ARRAY.size
        dtype = DTYPES.get(code)
        if dtype is None or offset + n * dtype.itemsize > size:
            raise ProtocolError("unknown array type or array longer than the message")
        arrays.append(np.frombuffer(payload, dtype=dtype, count=n, offset=offset))
        offset += n * dtype.itemsize
    return kind, arrays


def _read_exactly(sock: socket.socket, n: int) -> bytearray:
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:], n - got)
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise ChannelClosed(str(exc)) from None
        except TimeoutError:
            raise TimeoutError("no reply within the call timeout") from None
        if k == 0:
            raise ChannelClosed("connection closed by peer")
        got += k
    return buffer


def connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout)
    return sock
