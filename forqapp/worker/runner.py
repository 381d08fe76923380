"""The worker behind ``manage.py forq_worker``: runs the registered consumers on their queues.

One dispatcher (the thread that calls :meth:`Worker.run`) does every database write of the worker,
through the service layer: it claims due messages in batches (``claim_many``), hands them to a pool
of handler threads, and settles the results — successes acked together in one transaction per queue,
failures nacked, :class:`~forqapp.FatalError` failed at once. It also renews the lease of every
message it holds (heartbeat, every third of its queue's visibility timeout), so a slow healthy
handler keeps its message, while a crashed worker's messages come back after the visibility timeout.
It never holds more messages than it has handler threads (``prefetch``), so a crash costs few
innocent deliveries. When there is nothing to claim it waits (:func:`forqapp.services.waiting.claim`) on the
process's notifier, which wakes it within a few milliseconds of a produce in any process.

Poison messages: a handler that kills the process leaves its message in processing with the attempt
counted. The stale job hands it out again after the visibility timeout, and once it is out of
attempts makes it failed; the failed job moves it to the DLQ. Run the jobs (``forq_jobs``, or
``forq_worker --with-jobs``) and a poison message reaches the DLQ after ``FORQ_MAX_ATTEMPTS`` crashes.
"""

from __future__ import annotations

import functools
import logging
import queue as queue_module
import random
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections, connections, reset_queries

from .. import errors, metrics, services
from ..conf import forq_settings
from ..errors import Defer, FatalError, ForqError
from ..server import process
from ..services import clock, waiting
from ..services.db import database_errors
from .consumers import Consumer

logger = logging.getLogger("forqapp.worker")

ACK, NACK, FAIL, DEFER = "ack", "nack", "fail", "defer"
REPORT_EVERY_S = 10.0
FIND_QUEUES_S = 5.0  # how often a worker with find_queues looks for new queues
IDLE_WAIT_S = 1.0  # longest sleep on the notifier with nothing in flight
BUSY_WAIT_S = 0.01  # sleep between result checks while handlers run and the queues are empty
THROTTLED_WAIT_S = 0.05  # --burst: the wait for a slot of a queue whose limits hold due messages back


def _attempts_limit(queue: str) -> int:
    """``queue``'s ``max_attempts`` (0: unlimited, or its policy unreadable now), for a log line."""
    try:
        return services.policy(queue).max_attempts
    except Exception:  # noqa: BLE001 - the line is said anyway
        return 0


@dataclass
class _Held:
    """A message the worker holds: claimed, maybe running, not yet settled."""

    message: services.ReceivedMessage
    consumer: Consumer
    renewed: float = field(default_factory=time.monotonic)
    lost: bool = False


class Worker:
    """Claims messages of ``consumers`` (queue → :class:`Consumer`) and runs them on
    ``concurrency`` threads until :meth:`stop` (or, with ``burst``, until nothing is due)."""

    def __init__(
        self,
        consumers: dict[str, Consumer],
        *,
        concurrency: int = 1,
        prefetch: int | None = None,
        burst: bool = False,
        max_messages: int | None = None,
        using: str | None = None,
        report_every: float = REPORT_EVERY_S,
        start_jitter: float | None = None,
        find_queues: Callable[[Iterable[str]], dict[str, Consumer]] | None = None,
    ):
        if not consumers:
            raise ValueError("a worker needs at least one consumer")
        self.consumers = consumers
        self.queues = list(consumers)
        # New queues to run, looked for every FIND_QUEUES_S: a task backend that lists no QUEUES
        # takes any queue name, and a task enqueued to a new one must not wait for a restart.
        self._find_queues = find_queues
        self._found_at = time.monotonic()
        self.concurrency = concurrency
        self.prefetch = max(concurrency, prefetch or concurrency)
        self.burst = burst
        self._throttled: list[str] = []  # the reasons the last claims were held back (--burst waits them out)
        self.max_messages = max_messages
        self.using = using or services.alias()
        self.report_every = report_every
        # Seconds: a random wait up to this before the first claim (FORQ_WORKER_START_JITTER_MS),
        # so workers started together (a deploy, a supervisor's restart) do not all claim at once.
        self.start_jitter = (forq_settings.FORQ_WORKER_START_JITTER_MS / 1000 if start_jitter is None
                             else start_jitter)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop(): ends the wait for work at once
        self._work: queue_module.Queue = queue_module.Queue()
        self._results: queue_module.Queue = queue_module.Queue()
        self._held: dict[str, _Held] = {}
        # Settles (ack, nack, fail, defer) a database that could not write refused (a full disk, a
        # lock held too long): still held, tried again each turn until their leases end (_keep).
        self._due: list[tuple[_Held, str, BaseException | None]] = []
        self._threads: list[threading.Thread] = []
        self._next_queue = 0
        self.claimed = 0
        self.processed = 0
        self._counts: dict[str, int] = defaultdict(int)

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; :meth:`run` returns once the messages in flight are settled (an idle
        worker at once: the wait for work ends)."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: :meth:`stop` (the messages in flight are finished, those not
        started given back); a second exits at once with code 1 (:mod:`forqapp.server.process`)."""
        process.on_stop(self.stop)
        process.install_signal_handlers(
            "forq_worker", doing="finishing the messages in flight (again to exit now)",
            last_words="forq_worker: second signal, exiting now")

    @property
    def heartbeat_s(self) -> float:
        """The heartbeat of a queue that sets no visibility timeout of its own."""
        return max(0.05, forq_settings.FORQ_VISIBILITY_TIMEOUT_MS / 3000)

    def heartbeat_of(self, queue: str) -> float:
        """Every third of ``queue``'s visibility timeout (its policy, read at most every second)."""
        return max(0.05, services.policy(queue, using=self.using).visibility_timeout_ms / 3000)

    # -- the dispatcher --------------------------------------------------------------------

    def run(self) -> dict[str, int]:
        """Process messages until stopped; returns counts by outcome (ack, nack, fail, lost)."""
        for i in range(self.concurrency):
            thread = threading.Thread(target=self._handle_loop, name=f"forq-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        logger.info("forq_worker: %d thread(s) on %s", self.concurrency, ", ".join(self.queues))
        if self.start_jitter > 0:
            self._stop.wait(random.uniform(0, self.start_jitter))  # noqa: S311 - not for secrets
        last_report, reported, said_idle = time.monotonic(), 0, False
        try:
            while True:
                reset_queries()
                self._look_for_queues()
                self._settle(self._drain_results())
                self._heartbeat()
                clock.keep_in_step(self.using)  # the database's clock, measured again each minute
                now = time.monotonic()
                if now - last_report >= self.report_every:
                    # Busy: a line each report_every. Idle: one line when it goes idle, then DEBUG only.
                    busy = self.processed > reported or bool(self._held)
                    logger.log(
                        logging.INFO if busy or not said_idle else logging.DEBUG,
                        "forq_worker: %d messages in %.0fs (%.0f/s), %d in flight, %d in total%s",
                        self.processed - reported, now - last_report,
                        (self.processed - reported) / (now - last_report), len(self._held), self.processed,
                        "" if busy else "; idle, waiting for messages",
                    )
                    last_report, reported, said_idle = now, self.processed, not busy
                if waiting.draining():  # the process is stopping (forqapp.services.waiting.drain)
                    self._stop.set()
                if self._stop.is_set() or self._claims_left() == 0:
                    if self._stop.is_set():
                        self._release_unstarted()
                    # Stopping, a refused settle gets one more try, at shutdown; at --max-messages, its
                    # tries until its lease ends.
                    if len(self._held) <= (len(self._due) if self._stop.is_set() else 0):
                        break
                    self._wait_result(0.1)
                    continue
                capacity = min(self.prefetch - len(self._held), self._claims_left())
                if capacity <= 0:
                    self._wait_result(0.1)
                    continue
                # Nothing in flight: wait for a message (up to IDLE_WAIT_S, then report and look again).
                idle = not self._held and not self.burst
                self._throttled.clear()
                if waiting.claim(functools.partial(self._claim, capacity), self.queues,
                                 IDLE_WAIT_S if idle else 0, using=self.using, stop=self._stop.is_set,
                                 wake=self._wake):
                    continue
                if self._held:
                    self._wait_result(BUSY_WAIT_S)
                elif self.burst:
                    if not self._throttled:
                        break  # nothing due: drained
                    # Due messages a queue's rate or max_in_flight holds back (another process
                    # holds its slots): not drained yet, wait for the next slot.
                    self._stop.wait(THROTTLED_WAIT_S)
        finally:
            self._shutdown()
        return dict(self._counts)

    def _look_for_queues(self) -> None:
        """Add the queues ``find_queues`` gives that this worker does not run yet (every
        :data:`FIND_QUEUES_S`)."""
        if self._find_queues is None or time.monotonic() - self._found_at < FIND_QUEUES_S:
            return
        self._found_at = time.monotonic()
        try:
            found = self._find_queues(list(self.consumers))
        except database_errors():
            self._database_trouble("looking for new task queues")
            return
        found = {q: c for q, c in found.items() if q not in self.consumers}
        if found:
            self.consumers.update(found)
            self.queues = list(self.consumers)
            logger.info("forq_worker: new task queue(s) %s: running them too", ", ".join(sorted(found)))

    def _claims_left(self) -> int | float:
        if self.max_messages is None:
            return float("inf")
        return self.max_messages - self.claimed

    def _claim(self, capacity: float) -> int:
        """Claim up to ``capacity`` messages, queue by queue (round robin); returns how many."""
        got = 0
        for _ in range(len(self.queues)):
            if got >= capacity:
                break
            queue = self.queues[self._next_queue]
            self._next_queue = (self._next_queue + 1) % len(self.queues)
            consumer = self.consumers[queue]
            # A consumer that reports the used-up messages its claims redrive to the DLQ (the task
            # runners: task_finished for a task whose worker died during its last attempt).
            on_redriven = getattr(consumer, "on_redriven", None)
            redriven: list[services.ReceivedMessage] | None = [] if on_redriven is not None else None
            try:
                messages = services.claim_many(queue, int(capacity - got), using=self.using, redriven=redriven,
                                               throttled=self._throttled, draining=self.burst)
            except database_errors():
                self._database_trouble("claiming")
                return got
            if redriven:
                on_redriven(redriven, using=self.using)  # type: ignore[misc]
            for message in messages:
                held = _Held(message, consumer)
                self._held[message.id] = held
                metrics.in_flight(queue, 1)
                self._work.put(held)
            got += len(messages)
            self.claimed += len(messages)
        return got

    def _wait_result(self, timeout: float) -> None:
        try:
            item = self._results.get(timeout=timeout)
        except queue_module.Empty:
            return
        self._settle([item, *self._drain_results()])

    def _drain_results(self) -> list:
        items = []
        while True:
            try:
                items.append(self._results.get_nowait())
            except queue_module.Empty:
                return items

    def _settle(self, results: list) -> None:
        if not results and not self._due:
            return
        for held, _, _ in results:  # the handler is done with it
            metrics.in_flight(held.message.queue, -1)
            self.processed += 1
        todo, self._due = [*self._due, *results], []
        acks: dict[str, list[_Held]] = defaultdict(list)
        own: dict[str, list] = defaultdict(list)
        refused = False  # the database refused a write this turn: the rest waits for the next turn
        for held, outcome, error in todo:
            queue = held.message.queue
            if held.lost:
                self._settled(held, "lost")
                logger.warning("forq_worker: lost the lease of %s on %s before it finished; not settled",
                               held.message.id, queue)
                continue
            if getattr(held.consumer, "settles", False):  # e.g. forqapp.tasks' runners: results with the settles
                self._held.pop(held.message.id, None)
                own[queue].append((held.message, outcome, error))
                continue
            if outcome == ACK:
                acks[queue].append(held)
                continue
            if refused:
                self._keep(held, outcome, error)
                continue
            try:
                # The consumer's error goes with the message (last_error), into the DLQ and the admin.
                if outcome == DEFER:
                    assert isinstance(error, Defer)  # noqa: S101 - _handle pairs DEFER with its Defer
                    try:
                        services.defer(held.message, error.delay, state=error.state,  # type: ignore[arg-type]
                                       using=self.using)
                    except ForqError as invalid:
                        if invalid.code == errors.NOT_FOUND_MESSAGE:
                            raise
                        # the consumer's Defer was invalid (its delay, its state): retry, and say why
                        logger.warning("forq_worker: %s on %s raised an invalid Defer (%s); nacking",
                                       held.message.id, queue, invalid)
                        services.nack(held.message, invalid, using=self.using)
                        outcome = NACK
                elif outcome == FAIL:
                    services.fail(held.message, error, using=self.using)
                else:
                    services.nack(held.message, error, using=self.using)
                self._settled(held, outcome)
            except ForqError:
                self._settled(held, "lost")
            except database_errors():
                self._database_trouble(f"settling {held.message.id}")
                refused = True
                self._keep(held, outcome, error)
        for queue, items in own.items():  # the consumer settles its batch itself, in one transaction
            try:
                settled = self.consumers[queue].settle(items, using=self.using)  # type: ignore[attr-defined]
            except database_errors():
                self._database_trouble("settling tasks")
                settled = {"lost": len(items)}  # not settled: they come back when their leases end
            for outcome, n in settled.items():
                for _ in range(n):
                    self._count(queue, outcome)
        for queue, helds in acks.items():
            n = -1  # not acked: the database refused this write, or one earlier this turn
            if not refused:
                try:
                    n = services.ack_many([h.message for h in helds], using=self.using)
                except database_errors():
                    self._database_trouble("acking")
                    refused = True
            if n < 0:
                for held in helds:
                    self._keep(held, ACK, None)
                continue
            if n < len(helds):
                logger.warning("forq_worker: %d of %d acks on %s came too late (lease lost)",
                               len(helds) - n, len(helds), queue)
            # (each ack is fenced on its own: the others of the batch were acked)
            for i, held in enumerate(helds):
                self._settled(held, ACK if i < n else "lost")

    def _settled(self, held: _Held, outcome: str) -> None:
        self._held.pop(held.message.id, None)
        self._count(held.message.queue, outcome)

    def _keep(self, held: _Held, outcome: str, error: BaseException | None) -> None:
        """A settle the database refused (a full disk, a lock held too long): tried again next turn
        while the lease lasts (the heartbeat renews it when the database lets it: on a full disk
        with nothing else holding the SQLite file, it cannot). After that the message comes back to be
        handled again: a late settle is fenced by its receipt."""
        if (held.message.lease_expires_at or 0) > services.now_ms():
            self._due.append((held, outcome, error))
            return
        logger.warning("forq_worker: gave up the %s of %s on %s: the database refused it until its lease ended; "
                       "the message comes back", outcome, held.message.id, held.message.queue)
        self._settled(held, "lost")

    def _count(self, queue: str, outcome: str) -> None:
        self._counts[outcome] += 1
        metrics.handled(queue, outcome)

    def _heartbeat(self) -> None:
        if not self._held:
            return
        now = time.monotonic()
        try:  # (the queue's policy is read from the database too, once a second)
            for held in list(self._held.values()):
                if held.lost or held.renewed > now - self.heartbeat_of(held.message.queue):
                    continue
                if not services.extend(held.message, using=self.using):
                    held.lost = True
                held.renewed = time.monotonic()
        except database_errors():
            self._database_trouble("renewing leases")

    def _database_trouble(self, doing: str) -> None:
        """Called in an ``except``: say what failed, reconnect, wait a little. A database that
        cannot serve now (a full disk) is one line a second, not a traceback every 0.5 s."""
        errors.log_failure(logger, f"forq_worker ({doing})", sys.exc_info()[1] or Exception(), "reconnecting, retrying")
        try:
            connections[self.using].close()
        except database_errors():
            pass
        self._stop.wait(0.5)

    def _shutdown(self) -> None:
        self._release_unstarted()
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(1.0)
        self._settle(self._drain_results())
        if self._due:
            logger.warning("forq_worker: stopping with %d settle(s) the database refused (%s); those messages come "
                           "back when their leases end", len(self._due), ", ".join(sorted({o for _, o, _ in self._due})))
            for held, _, _ in self._due:
                self._settled(held, "lost")
            self._due = []
        logger.info("forq_worker: stopped after %d messages (%s)", self.processed,
                    ", ".join(f"{k} {v}" for k, v in sorted(self._counts.items())) or "none")
        connections[self.using].close()

    def _release_unstarted(self) -> None:
        """Give back messages claimed but not yet started (their attempt is not counted)."""
        while True:
            try:
                held = self._work.get_nowait()
            except queue_module.Empty:
                break
            if held is None:
                continue
            self._held.pop(held.message.id, None)
            metrics.in_flight(held.message.queue, -1)
            try:
                services.release(held.message, using=self.using)
            except (ForqError, DatabaseError):
                logger.warning("forq_worker: could not release %s", held.message.id)

    # -- handler threads -------------------------------------------------------------------

    def _handle_loop(self) -> None:
        try:
            while True:
                held = self._work.get()
                if held is None:
                    return
                try:
                    outcome = self._handle(held)
                except BaseException as exc:  # noqa: BLE001 - never lose a result, or shutdown would wait forever
                    logger.exception("forq_worker: handling %s failed", held.message.id)
                    outcome = (NACK, exc)
                self._results.put((held, *outcome))
        finally:
            connections.close_all()

    def _handle(self, held: _Held) -> tuple[str, BaseException | None]:
        """Run the consumer: (outcome, the exception it raised or None)."""
        message = held.message
        started = time.perf_counter()
        close_old_connections()
        error: BaseException | None = None
        try:
            held.consumer(message)
            outcome = ACK
        except Defer as exc:
            outcome, error = DEFER, exc
        except FatalError as exc:
            logger.warning("forq_worker: %s on %s failed for good: %s", message.id, message.queue, exc)
            outcome, error = FAIL, exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit in a handler thread nacks too
            reason = errors.unavailable(exc) if isinstance(exc, Exception) else None
            if reason is not None:  # the handler's own query met a database away: one line a second
                errors.say_unavailable(logger, f"forq_worker: a handler on {message.queue}", reason,
                                       "nacking its message")
            else:
                limit = _attempts_limit(message.queue)
                logger.exception("forq_worker: %s on %s (attempt %d%s) raised; %s", message.id, message.queue,
                                 message.attempts, f" of {limit}" if limit else "",
                                 "no attempt left: failed (the failed job moves it to the DLQ)"
                                 if limit and message.attempts >= limit else "nacking")
            outcome, error = NACK, exc
        finally:
            close_old_connections()
        seconds = time.perf_counter() - started
        metrics.worker_handler_duration_seconds.labels(message.queue).observe(seconds)
        return outcome, error
