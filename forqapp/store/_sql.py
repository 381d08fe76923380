"""SQL fragments both stores build the same way (plain SQL-92: no dialect in them)."""

from __future__ import annotations

from collections.abc import Sequence


def backoff_case(backoff_ms: Sequence[int]) -> str:
    """``CASE attempts WHEN 1 THEN … ELSE … END``: the nack delay by attempt number, in ms
    (the last value applies to every later attempt). Built from integers only."""
    if len(backoff_ms) == 1:
        return str(int(backoff_ms[0]))
    whens = " ".join(f"WHEN {i} THEN {int(ms)}" for i, ms in enumerate(backoff_ms[:-1], start=1))
    return f"CASE attempts {whens} ELSE {int(backoff_ms[-1])} END"
