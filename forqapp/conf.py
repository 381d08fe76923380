"""forqapp's settings: every ``FORQ_*`` name declared once here, with its type, default, meaning and
check, and read from Django settings on access.

Nothing is read at import time, so tests can override any value with pytest-django's ``settings``
fixture (or ``override_settings``) and a project sets them in ``settings.py``. Each declaration (a
:class:`Setting`, as procrastinate's ``contrib/django`` settings class does it with annotations)
says:

* the default, used when ``settings.py`` leaves the name out;
* the check of a value (:mod:`forqapp.checks` reports every bad one with its id, e.g.
  ``forqapp.E003``, and ``forq_serve`` refuses to start on it); a bad value read anyway raises
  :class:`~django.core.exceptions.ImproperlyConfigured` with the same line, never a late
  ``IndexError`` (``FORQ_BACKOFF_MS = ()`` once crashed the first nack);
* the type the value is given as (an ``int`` setting is read as ``int``: callers coerce nothing);
* an optional fallback to the environment (Forq's variable names) when ``settings.py`` leaves the
  name out or empty: the two secrets, so a project that never mentions them (as the tutorial's settings
  lines do not) still gets the key its deployment exports, the two listeners' addresses and
  ``FORQ_SERVE_JOBS``.

The docs' settings reference (docs/reference/settings.md) is generated from these declarations
when the docs are built (``scripts/docs_hooks.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast, overload

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from . import validation, vocab
from .errors import ForqError
from .validation import SendLimits

T = TypeVar("T")

_MISSING = object()

# --- values from the environment -------------------------------------------------------------

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def parse_bool(raw: str) -> bool:
    """An environment variable's boolean (``true``/``false``, ``1``/``0``, ``yes``/``no``,
    ``on``/``off``); :class:`ValueError` otherwise."""
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise ValueError(f"{raw!r} is not a boolean (use true or false)")


def parse_addr(value: str) -> tuple[str, int]:
    """``host:port`` (Forq's form; ``:8080`` means every interface) → (host, port)."""
    host, sep, port = str(value).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104 - Forq's ":8080" means every interface
    return ("127.0.0.1" if host == "localhost" else host), int(port)


# --- checks of a value: (name, value) -> what is wrong, or None -------------------------------

Check = Callable[[str, Any], "str | None"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(minimum: int) -> Check:
    def check(name: str, value: Any) -> str | None:
        if _is_int(value) and value >= minimum:
            return None
        return f"{name} must be an integer >= {minimum} (got {value!r})"

    return check


def number(minimum: float, *, above: bool = False, optional: bool = False) -> Check:
    """A number >= ``minimum`` (> with ``above``); ``None`` too with ``optional``."""

    def check(name: str, value: Any) -> str | None:
        if optional and value is None:
            return None
        if _is_number(value) and (value > minimum if above else value >= minimum):
            return None
        relation = ">" if above else ">="
        return f"{name} must be a number {relation} {minimum:g}{' or None' if optional else ''} (got {value!r})"

    return check


def optional_integer(minimum: int) -> Check:
    inner = integer(minimum)

    def check(name: str, value: Any) -> str | None:
        if value is None:
            return None
        problem = inner(name, value)
        return None if problem is None else problem.replace(" (got", " or None (got")

    return check


def boolean(name: str, value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{name} must be True or False (got {value!r})"


def text(name: str, value: Any) -> str | None:
    return None if isinstance(value, str) else f"{name} must be a string (got {value!r})"


def optional_text(name: str, value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else f"{name} must be a string or None (got {value!r})"


def sqs_account(name: str, value: Any) -> str | None:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{12}", value):
        return f"{name} must be an account id of 12 digits, not {value!r}"
    return None


def one_of(*choices: str) -> Check:
    def check(name: str, value: Any) -> str | None:
        if value in choices:
            return None
        return f"{name} must be {' or '.join(repr(c) for c in choices)} (got {value!r})"

    return check


def address(name: str, value: Any) -> str | None:
    try:
        parse_addr(value)
    except ValueError as exc:
        return f"{name}: {exc}"
    return None


def optional_address(name: str, value: Any) -> str | None:
    return None if value is None or value == "" else address(name, value)


def delays(name: str, value: Any) -> str | None:
    """A non-empty list of milliseconds (the n-th nack waits the n-th, the last one repeats)."""
    if isinstance(value, list | tuple) and value and all(_is_int(v) and v >= 0 for v in value):
        return None
    return f"{name} must be a non-empty list of integers >= 0 (milliseconds; got {value!r})"


#: The background jobs (forqapp.worker.jobs.JOBS has one of each): FORQ_JOB_INTERVALS' keys.
JOB_NAMES = ("expired", "failed", "stale", "expired-dlq", "failed-dlq", "db-optimize", "queue-depth", "schedules",
             "task-results", "moves")


def intervals(name: str, value: Any) -> str | None:
    """``{job name: seconds}``: known jobs, positive numbers."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{name} must be a dict of job name to seconds (got {value!r})"
    for job, seconds in value.items():
        if job not in JOB_NAMES:
            return f"{name}: no job {job!r} (jobs: {', '.join(sorted(JOB_NAMES))})"
        if not _is_number(seconds) or seconds <= 0:
            return f"{name}[{job!r}] must be a number of seconds > 0 (got {seconds!r})"
    return None


def queues(name: str, value: Any) -> str | None:
    """``FORQ_QUEUES``: ``{queue name: {policy field: value}}``, each valid as ``configure_queue``'s."""
    if not isinstance(value, dict):
        return f"{name} must be a dict of {{queue: policy}}"
    limit = ForqSettings.FORQ_MAX_QUEUES.raw()
    if _is_int(limit) and len(value) > limit:
        return f"{name} declares {len(value)} queues, more than FORQ_MAX_QUEUES ({limit})"
    for queue, fields in value.items():
        try:
            validation.queue_name(queue, produce=True)
            if not isinstance(fields, dict):
                return f"{name}[{queue!r}] must be a dict of policy fields"
            validation.policy(fields)
        except ForqError as e:
            return f"{name}[{queue!r}]: {e}"
    return None


def schedules(name: str, value: Any) -> str | None:
    """``FORQ_SCHEDULES``: ``{name: {queue, content, cron | every, …}}``, each valid as ``schedule()``'s."""
    if not isinstance(value, dict):
        return f"{name} must be a dict of {{name: schedule}}"
    limit = ForqSettings.FORQ_MAX_CONTENT_BYTES.resolve()[0] or ForqSettings.FORQ_MAX_CONTENT_BYTES.default
    for key, fields in value.items():
        if not isinstance(fields, dict):
            return f"{name}[{key!r}] must be a dict of schedule fields"
        try:
            validation.schedule(key, fields, content_limit=limit)
        except ForqError as e:
            return f"{name}[{key!r}]: {e}"
    return None


def mapping(name: str, value: Any) -> str | None:
    return None if value is None or isinstance(value, Mapping) else f"{name} must be a dict (got {value!r})"


# --- the declaration ---------------------------------------------------------------------------


class Setting(Generic[T]):
    """One ``FORQ_*`` setting: read on access from Django settings (else the environment, with
    ``env``; else the default), checked, and given as its declared type."""

    name: str

    def __init__(
        self,
        default: T,
        doc: str,
        *,
        check: Check | None = None,
        coerce: Callable[[Any], T] | None = None,
        env: Callable[[str], Any] | None = None,
        id: str = "forqapp.E010",  # noqa: A002 - a check's id, as Django calls it
        deploy: bool = False,
    ):
        self.default = default
        self.doc = doc
        self.check = check
        self.coerce = coerce
        self.env = env  # parses os.environ[name] when settings.py leaves it out, None or ""
        self.id = id
        self.deploy = deploy  # checked by ``manage.py check --deploy`` (forqapp.checks), not here

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Setting[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | Setting[T]:
        if obj is None:
            return self
        value, problem = self.resolve()
        if problem is not None:
            raise ImproperlyConfigured(f"{problem} ({self.id})")
        return cast(T, value)  # checked above: the declared type

    def raw(self) -> Any:
        """The value as configured (settings, then the environment, then the default), unchecked;
        an environment value that does not parse is returned as an :class:`_EnvError`."""
        value = getattr(django_settings, self.name, _MISSING)
        if self.env is not None and (value is _MISSING or value is None or value == ""):
            raw = os.environ.get(self.name)
            if raw is not None:
                try:
                    return self.env(raw)
                except ValueError as exc:
                    return _EnvError(f"{self.name}={exc}")
        return self.default if value is _MISSING else value

    def resolve(self) -> tuple[Any, str | None]:
        """(the value, coerced to its type, or None; what is wrong with it, or None)."""
        value = self.raw()
        if isinstance(value, _EnvError):
            return None, str(value)
        if self.check is not None and not self.deploy:
            problem = self.check(self.name, value)
            if problem is not None:
                return None, problem
        return (self.coerce(value) if self.coerce is not None else value), None

    def problem(self) -> str | None:
        return self.resolve()[1]

    @property
    def shown_default(self) -> str:
        """The default as the settings reference writes it."""
        return f"`{self.default!r}`"


class _EnvError(str):
    """What is wrong with an environment value that does not parse (reported by the checks)."""


def _tuple_of_int(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _dict(value: Any) -> dict:
    return dict(value or {})


class ForqSettings:
    """Every ``FORQ_*`` setting of forqapp (read on access; see the module's docstring)."""

    # Database and secrets
    FORQ_DATABASE: Setting[str] = Setting("default", "the database alias the queue lives on", check=text)
    FORQ_SYNCHRONOUS: Setting[str] = Setting(
        "NORMAL", "SQLite's `synchronous` on the queue's connections: `NORMAL` (WAL: a stored message survives "
        "a crash of any process, as Forq's) or `FULL` (it also survives a power loss; each commit waits for "
        "the disk)", check=one_of("NORMAL", "FULL"), env=str)
    FORQ_CLOCK: Setting[str] = Setting(
        "database", "the queue's clock on PostgreSQL: `database` (each process measures its offset to the "
        "database server's clock when it connects, and every minute from its loops, and follows it: hosts "
        "whose clocks disagree still agree on due times and leases) or `host` (each host's own clock). "
        "SQLite is one host: its clock is the host's either way", check=one_of("database", "host"), env=str)
    FORQ_AUTH_SECRET: Setting[str] = Setting(
        "", "the API key clients send in `X-API-Key`; required (>= 32 characters) to serve (E001)",
        check=text, env=str, id="forqapp.E001", deploy=True)
    FORQ_METRICS_ENABLED: Setting[bool] = Setting(False, "serve `GET /metrics`", check=boolean)
    FORQ_METRICS_TOP_QUEUES: Setting[int] = Setting(
        50, "`/metrics` has per-queue series for this many queues (the deepest); the others are summed "
        "under `queue_name=\"(other)\"`", check=integer(1))
    FORQ_METRICS_AUTH_SECRET: Setting[str] = Setting(
        "", "the key of `GET /metrics`; required (>= 32 characters) with metrics on (E002)",
        check=text, env=str, id="forqapp.E002", deploy=True)
    FORQ_KEYS_SECRET: Setting[str] = Setting(
        "", "the server key that seals scoped API keys' secrets at rest (AES-256-GCM); empty: derived "
        "from `SECRET_KEY`", check=text, env=str)
    FORQ_KEYS_CACHE_SECONDS: Setting[float] = Setting(
        5.0, "how long a process trusts its copy of a scoped key: revocation, rotation and disabling take "
        "effect within this (seconds)", check=number(0), coerce=float)
    FORQ_ENV: Setting[str] = Setting("local", "`pro`: HSTS and secure cookies", check=one_of("local", "pro"),
                                     id="forqapp.E004")
    # Message life
    FORQ_QUEUE_TTL_HOURS: Setting[int] = Setting(24, "expiry of a regular message (hours)", check=integer(1),
                                                 id="forqapp.E003")
    FORQ_DLQ_TTL_HOURS: Setting[int] = Setting(168, "expiry of a DLQ message (hours)", check=integer(1),
                                               id="forqapp.E003")
    FORQ_MAX_ATTEMPTS: Setting[int] = Setting(5, "deliveries before a message fails", check=integer(1))
    FORQ_BACKOFF_MS: Setting[tuple[int, ...]] = Setting(
        (1_000, 5_000, 15_000, 30_000, 60_000),
        "delay after the n-th nack (ms; the last one repeats)", check=delays, coerce=_tuple_of_int)
    FORQ_VISIBILITY_TIMEOUT_MS: Setting[int] = Setting(
        5 * 60 * 1000, "the lease a receive takes, for queues that set none (ms); the worker renews its "
        "messages every third of it", check=integer(1))
    FORQ_DEDUP_WINDOW_S: Setting[float] = Setting(
        300.0, "a send's `dedup_id` is remembered this long unless the queue or the send says (seconds)",
        check=number(0.001), coerce=float)
    FORQ_QUEUES: Setting[dict[str, Any]] = Setting(
        {}, "`{queue: {policy}}` applied by `migrate` and `forq_queues` (E050)", check=queues, coerce=_dict,
        id="forqapp.E050")
    FORQ_SCHEDULES: Setting[dict[str, Any]] = Setting(
        {}, "`{name: {queue, content, cron | every, …}}` periodic messages, applied by `migrate` and "
        "`forq_queues apply` (E051)", check=schedules, coerce=_dict, id="forqapp.E051")
    FORQ_MAX_QUEUES: Setting[int | None] = Setting(
        1_000, "how many queues may exist (a queue and its DLQ count as one); creating one more is refused "
        "(409 `queue.limit_reached`; `None`: no limit)", check=optional_integer(1))
    FORQ_LONG_POLL_SECONDS: Setting[float] = Setting(30.0, "longest wait of a consume (seconds)",
                                                     check=number(0), coerce=float)
    FORQ_MAX_CONTENT_BYTES: Setting[int] = Setting(262_144, "largest message content (bytes)", check=integer(1))
    FORQ_MAX_BODY_BYTES: Setting[int] = Setting(2 * 1024 * 1024, "largest request body (bytes)",
                                                check=integer(1))
    FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS: Setting[int] = Setting(
        10_000, "how far in the past a `processAfter` may be (ms)", check=integer(0))
    FORQ_PROCESS_AFTER_MAX_MS: Setting[int] = Setting(
        vocab.YEAR_S * 1000, "how far in the future a `processAfter` may be (ms)", check=integer(1))
    # Slow request bodies (forqapp's ASGI app, i.e. forq_serve): a body must arrive within
    # FORQ_BODY_TIMEOUT_S, and after FORQ_BODY_GRACE_S at least FORQ_BODY_MIN_RATE_BYTES_S on average.
    FORQ_BODY_TIMEOUT_S: Setting[float] = Setting(30.0, "a request body must arrive within this (seconds; 408)",
                                                  check=number(0, above=True), coerce=float)
    FORQ_BODY_GRACE_S: Setting[float] = Setting(5.0, "after this (seconds) a body must keep the minimum rate",
                                                check=number(0), coerce=float)
    FORQ_BODY_MIN_RATE_BYTES_S: Setting[float] = Setting(
        1024, "minimum average rate of a body after the grace (bytes/s; 0: none)",
        check=number(0, optional=True), coerce=lambda v: float(v or 0))
    # A body still arriving after FORQ_BODY_GRACE_S counts toward its client address's slow bodies;
    # one more than this is cut off (429), so one address cannot hold a listener's connections,
    # memory or (UI) request slots with bodies that never end.
    FORQ_BODY_SLOW_PER_ADDRESS: Setting[int] = Setting(
        8, "bodies one client address may have still arriving after the grace, per listener process "
        "(one more: 429)", check=integer(1))
    # Throttling of failed API-key checks, per client address
    FORQ_AUTH_MAX_FAILURES: Setting[int] = Setting(5, "failed API-key checks that block an address",
                                                   check=integer(1))
    FORQ_AUTH_FAILURE_WINDOW_S: Setting[int] = Setting(60, "… within this many seconds", check=integer(1))
    FORQ_AUTH_BLOCK_S: Setting[int] = Setting(60, "… block it for this many seconds", check=integer(1))
    # Throttling of failed logins (the UI's and the admin's), per client address and per username
    FORQ_LOGIN_MAX_FAILURES: Setting[int] = Setting(5, "failed logins that block an address or username",
                                                    check=integer(1))
    FORQ_LOGIN_FAILURE_WINDOW_S: Setting[int] = Setting(900, "… within this many seconds", check=integer(1))
    FORQ_LOGIN_BLOCK_S: Setting[int] = Setting(900, "… block it for this many seconds", check=integer(1))
    # Wake-ups of waiting consumers: a process with waiters sleeps until another process commits
    # (inotify on SQLite's files, LISTEN on PostgreSQL); where that is unavailable it polls (SQLite's
    # PRAGMA data_version). Full looks at every waited queue are at least the poll interval apart.
    FORQ_WAKE_POLL_MS: Setting[float] = Setting(
        5, "the least time between looks at every waited queue, and between reads of PostgreSQL's "
        "notifications while they stream; the poll interval where no change descriptor exists (ms)",
        check=number(0, above=True), env=float)
    FORQ_WAKE_FALLBACK_MS: Setting[float] = Setting(
        5000, "a process with waiters looks at every waited queue at least this often (ms)",
        check=number(0, above=True), env=float)
    # Server (forq_serve)
    FORQ_API_ADDR: Setting[str] = Setting("localhost:8080", "the API listener (`:8080`: every interface)",
                                          check=address, env=str)
    FORQ_UI_ADDR: Setting[str] = Setting("localhost:8081", "the UI listener", check=address, env=str)
    FORQ_SQS_ADDR: Setting[str | None] = Setting(
        None, "the SQS-compatible listener (`None`: off)", check=optional_address, env=str,
        coerce=lambda v: v or None)
    FORQ_SQS_ACCOUNT_ID: Setting[str] = Setting(
        "000000000000", "the account id of the SQS listener's queue URLs and ARNs (12 digits); every region "
        "names the same queues", check=sqs_account, env=str)
    FORQ_SQS_SEPARATE_REGIONS: Setting[bool] = Setting(
        False, "`True`: the region of a queue's URL or ARN (the one the request is signed for) separates "
        "queues, the same name in two regions being two queues (forqapp's `<region>.<name>`); `False`: every "
        "region names the same queues", check=boolean, env=parse_bool)
    FORQ_SQS_MAX_MESSAGE_BYTES: Setting[int] = Setting(
        1_048_576, "largest message the SQS listener takes (bytes: body and attributes, as SQS counts; SQS's "
        "own limit, 1 MiB, by default), whatever `FORQ_MAX_CONTENT_BYTES`", check=integer(1024), env=int)
    FORQ_UI_ENABLED: Setting[bool] = Setting(True, "`False` serves the API alone", check=boolean)
    FORQ_TRUST_PROXY_HEADERS: Setting[bool] = Setting(
        False, "client address from the rightmost `X-Forwarded-For`", check=boolean)
    # API server processes. None: the store's; 1 on SQLite (one writer: group commit makes one
    # process as fast as two, measured with bench/forqload, for half the memory), 2 on PostgreSQL.
    FORQ_API_WORKERS: Setting[int | None] = Setting(
        None, "API server processes (`None`: the store's, 1 on SQLite, 2 on PostgreSQL)",
        check=optional_integer(1))
    FORQ_UI_WORKERS: Setting[int] = Setting(1, "UI server processes", check=integer(1))
    # Django's ASGI handler runs each request in a thread of its own, with a database connection of
    # its own: 200 admin page loads at once took 99 PostgreSQL connections (max_connections 100).
    FORQ_UI_CONCURRENCY: Setting[int] = Setting(
        8, "requests a UI process serves at once (each holds a database connection); others wait",
        check=integer(1))
    # Threads that run the async API's database calls, per server process. None: 1 on SQLite (one
    # writer at a time; more threads only trade the GIL back and forth: measured 2,400 vs 1,600
    # produce/s with 4), 4 on PostgreSQL (network round trips overlap).
    FORQ_DB_THREADS: Setting[int | None] = Setting(
        None, "threads for the async API's database calls per process (`None`: the store's, 1 on "
        "SQLite, 4 on PostgreSQL)", check=optional_integer(1))
    FORQ_UI_URLCONF: Setting[str | None] = Setting(
        None, "the urlconf of the UI listener (`None`: `ROOT_URLCONF`)", check=optional_text,
        coerce=lambda v: v or None)
    # Background jobs
    FORQ_SERVE_JOBS: Setting[bool] = Setting(
        True, "`forq_serve` runs the background jobs (`False`: leave them to `forq_jobs` or cron)",
        check=boolean, env=parse_bool)
    FORQ_JOBS_LEASE_MS: Setting[int] = Setting(
        30_000, "the jobs lease (one scheduler per database) lasts this long, renewed every third (ms)",
        check=integer(1))
    FORQ_JOB_INTERVALS: Setting[dict[str, float]] = Setting(
        {}, "`{job: seconds}` overriding Forq's intervals", check=intervals, coerce=_dict)
    # Worker
    FORQ_CONSUMERS: Setting[dict[str, Any]] = Setting(
        {}, "`{queue: dotted path}` (or `{\"handler\": path, \"decode\": \"json\"}`) consumers (E040)",
        coerce=_dict, id="forqapp.E040")  # checked entry by entry by forqapp.worker.consumers
    FORQ_WORKER_START_JITTER_MS: Setting[float] = Setting(
        500, "a worker waits a random 0 … this before its first claim, so workers started together "
        "do not all claim at once (ms)", check=number(0))
    # UI
    FORQ_UI_LIVE_COUNTS_MS: Setting[float] = Setting(
        100, "counts that take longer are served from memory and refreshed in the background (ms)",
        check=number(0))
    FORQ_UI_COLD_WAIT_MS: Setting[float | None] = Setting(
        200, "a process's first count waits this long before showing a placeholder (ms; `None`: "
        "always count in the request)", check=number(0, optional=True))

    def __getattr__(self, name: str) -> Any:
        # Only names that are not declared get here.
        if name.startswith("FORQ_"):
            raise AttributeError(f"unknown forqapp setting {name}")
        raise AttributeError(name)

    @property
    def queue_ttl_ms(self) -> int:
        return self.FORQ_QUEUE_TTL_HOURS * 3_600_000

    @property
    def dlq_ttl_ms(self) -> int:
        return self.FORQ_DLQ_TTL_HOURS * 3_600_000


SETTINGS: dict[str, Setting[Any]] = {
    name: value for name, value in vars(ForqSettings).items() if isinstance(value, Setting)
}
"""Every declared setting, by name, in declaration order."""


def problems() -> list[tuple[str, str]]:
    """(check id, one line) for every setting whose value is wrong (deploy-only checks aside)."""
    found = []
    for setting in SETTINGS.values():
        if (problem := setting.problem()) is not None:
            found.append((setting.id, problem))
    return found


forq_settings = ForqSettings()

# Settings the request path reads on every call, resolved once (a read through ``forq_settings``
# costs ~3 µs: a lookup in Django's settings, the check, the coercion) and forgotten when a setting
# changes (``override_settings`` and pytest-django's ``settings`` send ``setting_changed``).
_hot: dict[str, Any] = {}


def hot(name: str) -> Any:
    """``forq_settings.<name>``, cached until the next ``setting_changed``."""
    try:
        return _hot[name]
    except KeyError:
        value = _hot[name] = getattr(forq_settings, name)
        return value


def _forget_hot(**kwargs: Any) -> None:
    _hot.clear()


setting_changed.connect(_forget_hot, dispatch_uid="forqapp.conf.hot")


def send_limits() -> SendLimits:
    """What a send is checked against, from the settings (cached as :func:`hot` is)."""
    return SendLimits(hot("FORQ_MAX_CONTENT_BYTES"), hot("FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS"),
                      hot("FORQ_PROCESS_AFTER_MAX_MS"))
