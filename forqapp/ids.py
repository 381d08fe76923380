"""Message ids: UUIDv7 text (RFC 9562), time-ordered, made by the server.

``uuid6.uuid7()`` costs ~6 µs an id here and, called faster than once a millisecond, pushes its
timestamp ahead of the clock (it adds 1 ms per call). Bulk sends make ids by the thousand, so this
module lays them out directly: 48-bit Unix ms, version 7, a 12-bit counter that keeps ids made in
the same millisecond in order (RFC 9562 §6.2, method 1), variant, 62 random bits. ~0.6 µs an id.
The ``uuid6`` package stays the reference: tests/test_ids.py parses these ids with it.
"""

from __future__ import annotations

import os
import threading

from .utils import now_ms

_lock = threading.Lock()
_last_ms = 0
_seq = 0

# Random hex digits, drawn from os.urandom 4 KiB at a time: one system call per ~450 ids made one at
# a time rather than two an id (a single send's id costs ~1.2 µs, from ~2.5). Emptied in a forked
# child, which must not repeat its parent's digits.
_POOL_BYTES = 4096
_pool = ""
_pool_at = 0


def _forget_pool() -> None:
    global _pool, _pool_at
    _pool, _pool_at = "", 0


os.register_at_fork(after_in_child=_forget_pool)


def _random_hex(digits: int) -> str:
    """``digits`` (even) random hex digits. Call with the lock held."""
    global _pool, _pool_at
    if digits > 2 * _POOL_BYTES:  # a bulk send's: straight from the system
        return os.urandom(digits // 2).hex()
    at = _pool_at
    if at + digits > len(_pool):
        _pool, at = os.urandom(_POOL_BYTES).hex(), 0
    _pool_at = at + digits
    return _pool[at:at + digits]


def _reserve(n: int) -> tuple[int, int, str]:
    """A millisecond, the first of ``n`` consecutive counter values in it, and 16 random hex
    digits for each of the ``n`` ids (2 + 60 random bits used)."""
    global _last_ms, _seq
    with _lock:
        rand = _random_hex(2 + 16 * n)
        ms = now_ms()
        if ms > _last_ms:
            # Random start, leaving room to count: ids of two processes in one ms rarely collide
            # in the counter, and never in the 62 random bits that follow.
            _last_ms, _seq = ms, min(int(rand[:2], 16) << 2, 0x1000 - n)
        elif _seq + n > 0x1000:
            _last_ms += 1  # counter exhausted: borrow the next millisecond (rare)
            _seq = 0
        start = _seq
        _seq += n
        return _last_ms, start, rand[2:]


# Hex strings laid out once: the version nibble with each 12-bit counter value, and the variant
# nibble (binary 10xx) for each hex digit whose low two bits it keeps.
_VERSION_SEQ = [f"7{i:03x}" for i in range(0x1000)]
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def new_ids(n: int) -> list[str]:
    out: list[str] = []
    while n > 0:
        chunk = min(n, 0xFFF)
        ms, seq, rand = _reserve(chunk)
        stamp = f"{ms & 0xFFFFFFFFFFFF:012x}"
        head = f"{stamp[:8]}-{stamp[8:]}-"
        variant, version_seq = _VARIANT, _VERSION_SEQ
        out.extend(
            f"{head}{version_seq[seq + i]}-{variant[rand[j]]}{rand[j + 1:j + 4]}-{rand[j + 4:j + 16]}"
            for i, j in zip(range(chunk), range(0, 16 * chunk, 16), strict=True)
        )
        n -= chunk
    return out


def new_id() -> str:
    """One id: :func:`new_ids`' layout without its batch steps (a single send's, ~1 µs less)."""
    ms, seq, rand = _reserve(1)
    stamp = f"{ms & 0xFFFFFFFFFFFF:012x}"
    return f"{stamp[:8]}-{stamp[8:]}-{_VERSION_SEQ[seq]}-{_VARIANT[rand[0]]}{rand[1:4]}-{rand[4:]}"
