"""A wrong secret and a wrong access key id take the same time (issue 16): neither tells a guesser
whether the id exists. Both are answered from the per-process cache after the first try (an unknown
id is remembered as unknown) and both end in one constant-time compare of 40 characters (against a
dummy secret for an unknown id). The fastest of interleaved runs, printed (``pytest -s``)."""

from __future__ import annotations

import time

import pytest

from forqapp.keys import cache, service, tokens
from forqapp.keys.cache import for_token

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def medians(cases: dict[str, str], rounds: int = 30, per_round: int = 2000) -> dict[str, float]:
    """The mean CPU time of one for_token call (ns) in the fastest of ``rounds`` rounds, the cases
    interleaved, in an order that turns each round. This thread's CPU time, and the fastest round,
    not wall time and the median: other load on the machine only ever adds time, and a CI host busy
    with other jobs once put the median of one case 50 % above the others (the work itself is what
    must not differ)."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for i in range(rounds):
        for name in order[i % len(order):] + order[:i % len(order)]:
            token = cases[name]
            start = time.thread_time_ns()
            for _ in range(per_round):
                for_token(token)
            samples[name].append((time.thread_time_ns() - start) / per_round)
    return {name: min(values) for name, values in samples.items()}


def same_time(measure, low: float, high: float, attempts: int = 3) -> None:
    """``measure()`` (fresh tokens each time) gives (wrong id / wrong secret, figures): within
    [low, high] in one of ``attempts`` tries. A real difference of work shows in every try; a
    try off the band with nothing changed is this machine's noise (on a 2-core VM, one case of a
    process measured 0.77× and 1.49× of the other in two runs of the same code, 2026-11-26)."""
    tries = []
    for _ in range(attempts):
        ratio, figures = measure()
        tries.append((round(ratio, 3), figures))
        if low < ratio < high:
            return
    raise AssertionError(f"wrong id / wrong secret outside ({low}, {high}) in every try: {tries}")


def test_wrong_secret_and_wrong_id_take_the_same_time(settings):
    settings.FORQ_KEYS_CACHE_SECONDS = 3600
    cache.forget()
    issued = service.create("timed", ["orders:produce"], actor="test", via="cli")

    def measure() -> tuple[float, dict[str, float]]:
        wrong_secret = tokens.token(issued.key.access_key_id, tokens.new_secret())
        wrong_id = tokens.token(tokens.new_access_key_id(), issued.secret)
        for token in (issued.token, wrong_secret, wrong_id):
            for_token(token)  # first tries: one load each, then cached
        assert for_token(wrong_secret) is None and for_token(wrong_id) is None
        m = medians({"right": issued.token, "wrong secret": wrong_secret, "wrong id": wrong_id})
        ratio = m["wrong id"] / m["wrong secret"]
        print(f"\nfor_token, fastest round: right {m['right']:.0f} ns, wrong secret {m['wrong secret']:.0f} ns, "
              f"wrong id {m['wrong id']:.0f} ns; wrong id / wrong secret = {ratio:.3f}")
        return ratio, m

    same_time(measure, 0.9, 1.1)  # the same work; the band is the noise of CPU time


def test_uncached_wrong_secret_and_wrong_id_cost_one_read_each(settings, django_assert_num_queries):
    """Before the cache knows them, each costs exactly one indexed read: no query tells them apart."""
    cache.forget()
    issued = service.create("timed-cold", ["orders:produce"], actor="test", via="cli")
    with django_assert_num_queries(1):
        assert for_token(tokens.token(issued.key.access_key_id, tokens.new_secret())) is None
    with django_assert_num_queries(1):
        assert for_token(tokens.token(tokens.new_access_key_id(), issued.secret)) is None


def test_uncached_wrong_secret_and_wrong_id_take_the_same_time(settings):
    """Before the cache knows them (a guesser can wait out FORQ_KEYS_CACHE_SECONDS): an unknown id
    opens a dummy sealed secret and parses dummy grants, as a known id's load does. Printed."""
    for i in range(50):  # a table with some keys in it
        service.create(f"cold-{i}", ["orders:produce"], actor="test", via="cli")
    issued = service.create("timed-cold-medians", ["orders:produce"], actor="test", via="cli")

    def measure() -> tuple[float, dict[str, float]]:
        wrong_secret = tokens.token(issued.key.access_key_id, tokens.new_secret())
        samples: dict[str, list[float]] = {"wrong secret": [], "wrong id": []}
        for _ in range(31):
            for name in samples:
                batch = [wrong_secret if name == "wrong secret"
                         else tokens.token(tokens.new_access_key_id(), issued.secret) for _ in range(60)]
                start = time.thread_time_ns()
                for token in batch:
                    cache.forget(token.partition(".")[0])
                    assert for_token(token) is None
                samples[name].append((time.thread_time_ns() - start) / len(batch))
        m = {name: min(values) for name, values in samples.items()}  # the fastest batch: see medians()
        ratio = m["wrong id"] / m["wrong secret"]
        print(f"\nuncached for_token, fastest batch: wrong secret {m['wrong secret'] / 1000:.1f} µs, "
              f"wrong id {m['wrong id'] / 1000:.1f} µs; wrong id / wrong secret = {ratio:.3f}")
        return ratio, m

    # Each call reads the database (~0.4 ms on SQLite), whose time moves more than the work compared:
    # 0.92 and 1.16 were measured with nothing changed, and skipping the dummy unseal gives 0.91. So
    # the band only catches a gross difference; the same work is asserted step by step below.
    same_time(measure, 0.75, 1.33)


def test_uncached_wrong_id_does_the_work_of_a_wrong_secret(monkeypatch):
    """What the timing above cannot tell apart within its noise, counted: before the cache knows
    them, a wrong id and a wrong secret each make one read, open one sealed secret and parse one
    grant list (the unknown id's are a dummy's); neither does anything the other does not."""
    from forqapp.keys import cache as key_cache
    from forqapp.keys import crypto, grants

    issued = service.create("counted-cold", ["orders:produce"], actor="test", via="cli")
    calls: list[str] = []
    for module, name in ((crypto, "unseal"), (grants, "parse_all")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    for token in (tokens.token(issued.key.access_key_id, tokens.new_secret()),
                  tokens.token(tokens.new_access_key_id(), issued.secret)):
        key_cache.forget(token.partition(".")[0])
        calls.clear()
        assert for_token(token) is None
        assert calls == ["unseal", "parse_all"], (token, calls)
