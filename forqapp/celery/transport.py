"""The ``forq://`` kombu transport: Celery's broker is forqapp's Python API, on the project's database.

* A Celery queue is the forqapp queue of the same name (a valid forqapp queue name: 1-80 of
  ``a-z A-Z 0-9 . _ -``; Celery's ``celery`` is one). A message whose exchange has no binding
  declared in this process goes to the queue named by its routing key (Celery's default routing).
* Publishing is :func:`forqapp.services.send`, on the caller's connection: inside the caller's
  ``transaction.atomic()`` on the same database, the message commits or rolls back with it (the
  outbox). kombu's priority 0-9 (higher first, as on RabbitMQ) is the message's forqapp priority.
* A delivery is a claim with a lease of ``broker_transport_options["visibility_timeout"]`` seconds
  (default: the queue's). The delivery tag is ``queue/id/receipt``: kombu's ack is
  :func:`forqapp.services.ack_delivery`, a reject with requeue a nack (again after the queue's
  backoff, the attempt counted), a reject without requeue a fail (to the DLQ at once); unacked
  messages a closing channel hands back are released (back at once, the attempt not counted).
* While the consumer holds a delivery (prefetched, waiting for its ``eta``, or running with
  ``acks_late``) the channel renews its lease every third of it, from the consuming thread's
  loop: a held message is never delivered twice while its worker lives, and comes back one lease
  after the worker died.
* An idle consumer waits on forqapp's wake-ups (:func:`forqapp.services.waiting.claim`): a send
  from any process wakes it within milliseconds, and no query runs while nothing happens. A
  process that consumes on several channels (a worker's tasks and its remote-control mailbox)
  waits on all their queues at once.
* Remote control (``celery inspect``, ``celery control``): kombu's mailbox broadcasts on a
  *fanout* exchange ``NS.pidbox`` to each worker's queue ``HOSTNAME.NS.pidbox`` and replies on the
  direct exchange ``reply.NS.pidbox`` to the queue ``OID.reply.NS.pidbox`` (routing key ``OID``).
  Bindings live in each process's memory, so the mailbox's are found by those names: a fanout
  message goes to every existing queue named ``*.EXCHANGE`` but the reply queues. Mailbox queues are forqapp queues
  whose names are escaped where a host name has other characters (``celery@host`` →
  ``celery_40host``), keep their messages a minute, and are deleted when the channel that
  declared them closes. Other fanout exchanges (a broadcast queue of your own) are not supported.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from queue import Empty
from typing import Any

import django
from django.apps import apps
from django.db import connections
from kombu.transport import virtual
from kombu.utils.json import dumps, loads

from .. import services, validation, vocab
from ..errors import ForqError
from ..services import waiting

logger = logging.getLogger("forqapp.celery")

#: How many messages one claim takes when kombu sets no prefetch limit.
DEFAULT_BATCH = 10
#: A wait with no timeout (``drain_events()``) is cut in waits of this many seconds.
LONG_WAIT_S = 60.0
#: kombu's priorities (0-9), as forqapp priorities: the same numbers, higher first.
PRIORITY_MIN, PRIORITY_MAX = 0, 9
#: kombu's mailbox (remote control) queues and exchanges end so.
MAILBOX_SUFFIX = ".pidbox"
#: How long a mailbox queue keeps a message, in seconds (a dead worker's queue is not read).
MAILBOX_RETENTION_S = 60
_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9._-]")
QUEUE_NAME_MAX = 80  # vocab.QUEUE_NAME_PATTERN's


def queue_name(name: str) -> str:
    """``name`` as a forqapp queue name, or ValueError saying why it cannot be one. A mailbox
    queue's name (``….pidbox``, made of a host name) is escaped instead: see :func:`mailbox_queue`."""
    if name.endswith(MAILBOX_SUFFIX):
        return mailbox_queue(name)
    try:
        return validation.queue_name(name, produce=True)
    except ForqError:
        raise ValueError(
            f"forq:// cannot use the queue {name!r}: a Celery queue is a forqapp queue, named by 1-80 of "
            f"a-z A-Z 0-9 . _ - (not ending in {vocab.DLQ_SUFFIX!r}); rename it in task_queues or -Q") from None


def mailbox_queue(name: str) -> str:
    """A kombu mailbox queue's forqapp name: each character a queue name cannot hold as ``_`` and
    its code in hex (``celery@web-1.celery.pidbox`` → ``celery_40web-1.celery.pidbox``); a name
    still too long keeps its end (the exchange's name) after a digest of the whole."""
    escaped = _NOT_IN_A_NAME.sub(lambda m: "".join(f"_{b:02x}" for b in m.group().encode()), name)
    if escaped.startswith("."):
        escaped = "_2e" + escaped[1:]
    if len(escaped) > QUEUE_NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        escaped = f"{digest}.{escaped[-(QUEUE_NAME_MAX - 17):].lstrip('.')}"
    return validation.queue_name(escaped, produce=True)


def priority(message: dict[str, Any]) -> int:
    """The forqapp priority of a kombu message: its ``priority`` property (0-9), clamped."""
    value = message.get("properties", {}).get("priority")
    if not isinstance(value, int) or isinstance(value, bool):
        return 0
    return min(max(value, PRIORITY_MIN), PRIORITY_MAX)


def delivery_tag(message: services.ReceivedMessage) -> str:
    return f"{message.queue}/{message.id}/{message.receipt}"


def parse_tag(tag: str) -> tuple[str, str, int]:
    """``(queue, message id, receipt)`` of a delivery tag."""
    queue, message_id, receipt = str(tag).rsplit("/", 2)
    return queue, message_id, int(receipt)


def setup_django() -> None:
    """Django set up, if nothing has yet, before the transport touches the database. The worker and a
    web process have it set up already; Celery's other commands (``celery inspect``, ``control``)
    load a ``proj/celery.py`` that does not, and would run forqapp's queries before any app is
    ready: without forqapp's ``ready()`` (its connections' settings) and with Django's warning
    about queries during app initialization. Not while the apps are loading (a ``ready()`` that
    publishes a task): that is the caller's own doing."""
    if not apps.ready and not apps.loading:
        django.setup()


class QoS(virtual.QoS):
    """kombu's bookkeeping of unacked deliveries, settling each one in forqapp."""

    def ack(self, delivery_tag: str) -> None:
        self.channel._settle(delivery_tag, "ack")
        super().ack(delivery_tag)
        self.channel._settled.set()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel._settle(delivery_tag, "nack" if requeue else "fail")
        self._quick_ack(delivery_tag)  # settled above: not kombu's requeue (a copy of the message)
        self.channel._settled.set()

    def restore_unacked(self) -> list:
        """Hand back what this channel still holds (a worker stopping): released, back at once."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        errors: list = []
        for tag in tags:
            try:
                self.channel._settle(tag, "release")
            except Exception as exc:  # noqa: BLE001 - kombu reports what it could not restore
                errors.append((exc, tag))
        return errors


class Channel(virtual.Channel):
    QoS = QoS
    from_transport_options = (*virtual.Channel.from_transport_options, "visibility_timeout")
    supports_fanout = True  # the mailbox's fanout only (see the module's docstring)

    #: the lease of a delivery, in seconds (None: the queue's visibility timeout)
    visibility_timeout: float | None = None

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        setup_django()
        super().__init__(connection, **kwargs)
        host = connection.client.hostname
        self.using = host or None  # forq://ALIAS: that database alias; forq://: the default one
        if self.using is not None and self.using not in connections.settings:
            raise ValueError(f"forq://{host}: no database alias {host!r} in DATABASES")
        self._held: dict[str, services.ReceivedMessage] = {}  # tag -> delivery, renewed while held
        self._lock = threading.Lock()
        self._settled = threading.Event()  # set by each ack/reject: a full prefetch may take more
        self._no_ack: set[str] = set()  # queues consumed without acks: settled when delivered
        self._mailboxes: set[str] = set()  # mailbox queues this channel declared: deleted at close
        self._kombu_names: dict[str, str] = {}  # forqapp name -> kombu's, where they differ (mailboxes)

    # --- kombu's queue operations ----------------------------------------------------------

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        name = queue_name(queue)  # a queue forqapp cannot have is refused when declared, not on first send
        if queue.endswith(MAILBOX_SUFFIX) and name not in self._mailboxes:
            services.configure_queue(name, retention=MAILBOX_RETENTION_S, using=self.using)
            self._mailboxes.add(name)

    def close(self) -> None:
        super().close()
        mailboxes, self._mailboxes = self._mailboxes, set()
        for name in mailboxes:
            try:
                services.delete_queue(name, using=self.using)
                services.delete_dead(name + "-dlq", using=self.using)  # a mailbox's dead letters go with it
            except Exception:  # noqa: BLE001 - a closing channel (the database may be gone)
                logger.warning("forq://: could not delete the mailbox queue %s", name, exc_info=True)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # forqapp queues exist once named

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        services.send(queue_name(queue), dumps(message), priority=priority(message), using=self.using)

    def _size(self, queue: str) -> int:
        try:
            counts = services.queue_info(queue_name(queue), using=self.using).counts
        except ForqError:  # no such queue yet
            return 0
        return counts.get("ready", 0) + counts.get("delayed", 0)

    def _purge(self, queue: str) -> int:
        # kombu's purge removes the ready messages: the tasks workers hold run on and are acked.
        return services.purge(queue_name(queue), ready_only=True, using=self.using)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        services.delete_queue(queue_name(queue), using=self.using)

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        # Bindings live in each process's memory: a producer that declared none sends by routing key
        # (direct exchanges only: a topic's routing key, as Celery's events', names no queue), and a
        # mailbox's reply to the queue kombu names by it.
        found = super()._lookup(exchange, routing_key, default)
        if found or not routing_key or self.typeof(exchange).type != "direct":
            return found
        if exchange.endswith(MAILBOX_SUFFIX):
            return [f"{routing_key}.{exchange}"]
        return [routing_key]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """A fanout binding: kept by the queue's name (the mailbox's), nothing to store."""

    def get_table(self, exchange: str) -> list:
        return self.state.exchanges[exchange]["table"]

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        """A mailbox broadcast: to every queue named ``*.EXCHANGE`` (each worker's mailbox), not
        to the reply queues (``*.reply.EXCHANGE``)."""
        if not exchange.endswith(MAILBOX_SUFFIX):
            raise NotImplementedError(f"forq:// delivers fanout exchanges of kombu's mailbox only, not {exchange!r}")
        suffix = "." + queue_name(exchange)
        replies = ".reply" + suffix  # the callers' reply queues, OID.reply.NS.pidbox
        body = dumps(message)
        for info in services.list_queues(using=self.using):
            if info.name.endswith(suffix) and not info.name.endswith(replies):
                services.send(info.name, body, using=self.using)

    # --- consuming -------------------------------------------------------------------------

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        name = queue_name(queue)
        if name != queue:
            self._kombu_names[name] = queue
        if no_ack:
            self._no_ack.add(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        self._no_ack.discard(self._tag_to_queue.get(consumer_tag, ""))
        return super().basic_cancel(consumer_tag)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack:
            self._settle(message.delivery_tag, "ack")
        return message

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        while True:
            got = services.claim_many(queue_name(queue), 1, visibility_timeout=self.visibility_timeout,
                                      using=self.using)
            if not got:
                raise Empty()
            payload = self._payload(got[0])
            if payload is not None:
                return payload

    def drain_events(self, timeout: float | None = None, callback: Any = None) -> Any:
        if not self._consumers:
            raise Empty()
        self._renew()
        wait = LONG_WAIT_S if timeout is None else timeout
        if self._held:  # wake up in time to renew what is held
            wait = min(wait, self._renew_every())
        if wait > 0 and len([c for c in self.connection.channels if c._consumers]) > 1:
            wait = 0  # several channels consume: the transport waits for all of them (Transport.drain_events)
        if not self.qos.can_consume():  # the prefetch is full: wait for an ack, not for messages
            self._settled.clear()
            if not self.qos.can_consume():
                self._settled.wait(wait)
            raise Empty()
        limit = self.qos.can_consume_max_estimate() or DEFAULT_BATCH
        queues = [queue_name(q) for q in self._active_queues]
        got = waiting.claim(lambda: self._claim(queues, limit), queues, wait, using=self.using)
        if not got:
            raise Empty()
        deliver = callback or self.connection._deliver
        delivered = 0
        for message in got:
            payload = self._payload(message)
            if payload is None:
                continue
            delivered += 1
            queue = self._kombu_names.get(message.queue, message.queue)
            if queue in self._no_ack:  # nobody will ack it: taken for good when delivered
                self._settle(payload["properties"]["delivery_tag"], "ack")
            deliver(payload, queue)
        if not delivered:
            raise Empty()
        return None

    def _claim(self, queues: list[str], limit: int) -> list[services.ReceivedMessage]:
        got: list[services.ReceivedMessage] = []
        for queue in queues:  # in the order of -Q / task_queues, as kombu's own cycle would
            if len(got) >= limit:
                break
            got += services.claim_many(queue, limit - len(got), visibility_timeout=self.visibility_timeout,
                                       using=self.using)
        return got

    def _payload(self, message: services.ReceivedMessage) -> dict[str, Any] | None:
        """The kombu message a delivery carries; None for content that is not one (sent to the
        queue by another client), which goes to the DLQ rather than stop the worker."""
        tag = delivery_tag(message)
        try:
            payload = loads(message.content)
            payload["properties"]["delivery_tag"] = tag
        except (ValueError, TypeError, KeyError) as exc:
            logger.error("forq://: message %s of %s is not a kombu message: to the DLQ", message.id, message.queue)
            try:
                services.fail(message, f"not a kombu message: {exc!r}"[:200], using=self.using)
            except ForqError:
                pass
            return None
        payload["redelivered"] = message.attempts > 1
        with self._lock:
            self._held[tag] = message
        return payload

    # --- settling and leases ---------------------------------------------------------------

    def _settle(self, tag: str, action: str) -> None:
        """``action`` (ack, nack, fail, release) on delivery ``tag``; a delivery no longer current
        (its lease ended and it went to another consumer) is logged, not raised: at least once."""
        with self._lock:
            message = self._held.pop(tag, None)
        queue, message_id, receipt = parse_tag(tag)
        try:
            if action == "ack":
                services.ack_delivery(queue, message_id, receipt, using=self.using)
            elif action == "nack":
                services.nack_delivery(queue, message_id, receipt, using=self.using)
            elif action == "fail":
                services.fail(message or services.ReceivedMessage(message_id, queue, "", 0, receipt),
                              "rejected by the Celery worker", using=self.using)
            else:
                services.release_many(queue, [(message_id, receipt)], using=self.using)
        except ForqError as exc:
            logger.warning("forq://: could not %s message %s of %s: %s (its lease had ended?)",
                           action, message_id, queue, exc)

    def _renew_every(self) -> float:
        """Seconds between renewals: a third of the shortest lease held."""
        with self._lock:
            leases = [m.lease_ms for m in self._held.values() if m.lease_ms]
        return max(min(leases, default=30_000) / 3000, 0.05)

    def _renew(self) -> None:
        """Renew the leases of the held deliveries that have used a third of theirs."""
        now = services.now_ms()
        with self._lock:
            due = [m for m in self._held.values()
                   if m.lease_ms and m.lease_expires_at is not None and m.lease_expires_at - now < m.lease_ms * 2 / 3]
        for message in due:
            try:
                if self.visibility_timeout is None:  # the queue's lease
                    renewed = services.extend(message, using=self.using)
                else:  # not extend(): it never gives less than the queue's own lease
                    renewed = services.change_visibility([message], self.visibility_timeout, using=self.using) == 1
                    message.lease_expires_at = services.now_ms() + (message.lease_ms or 0)
            except ForqError:
                renewed = False
            if not renewed:  # settled meanwhile, or its lease ended: nothing more to renew
                with self._lock:
                    self._held.pop(delivery_tag(message), None)


class Transport(virtual.Transport):
    """kombu's ``forq://`` transport."""

    Channel = Channel
    driver_type = "forq"
    driver_name = "forqapp"
    default_port = None
    polling_interval = 1.0  # only where no channel consumes: the consuming channel waits on wake-ups

    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    def driver_version(self) -> str:
        return "1"

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": None, "hostname": ""}

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver what comes within ``timeout`` seconds (socket.timeout if nothing does): a
        consuming channel waits for wake-ups itself; several consuming channels (a worker's tasks
        and its mailbox) are tried in turn without waiting, and the wait is for all their queues."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError()
            consuming = [channel for channel in self.channels if channel._consumers]
            try:
                self.cycle.get(self._deliver, timeout=remaining)
                return
            except Empty:
                if not consuming:
                    time.sleep(self.polling_interval if remaining is None else min(remaining, self.polling_interval))
                elif len(consuming) > 1:
                    _wait(consuming, LONG_WAIT_S if remaining is None else remaining)


def _wait(channels: list[Channel], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for a wake-up on the queues of ``channels`` that may
    take more, or for an ack on one whose prefetch is full (less when one holds deliveries
    whose leases are to be renewed)."""
    for channel in channels:
        channel._settled.clear()  # before can_consume(): an ack in between is not missed
    queues: set[str] = set()
    wake = None
    for channel in channels:
        if channel._held:
            timeout = min(timeout, channel._renew_every())
        if channel.qos.can_consume():
            queues.update(queue_name(q) for q in channel._active_queues)
        elif wake is None:
            wake = channel._settled
        else:  # a second full channel: look again soon
            timeout = min(timeout, 0.1)
    waiting.wait(sorted(queues), timeout, using=channels[0].using, wake=wake)
