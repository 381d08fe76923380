"""Forq's HTTP API (the messages of one queue) as async Django views.

Each view validates the request (:mod:`forqapp.validation`; queue names by Forq's v1 rule, at most
64 characters, where forqapp's other faces take 80), calls one service function and maps the
outcome to Forq's status codes; what every view shares (method, key, errors, headers) is
:mod:`forqapp.api.plumbing`'s. ``forq_serve`` routes these paths straight to the views
(:mod:`forqapp.api.asgi`); mounted with ``include("forqapp.urls")`` they run under any Django server.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import services, validation
from ..conf import hot
from ..services import groupcommit, waiting
from ..validation import Delivery
from .plumbing import RECEIPT_HEADER, body_of, endpoint, json_object


@endpoint("GET", "POST", waits=("GET",), action={"GET": "consume", "POST": "produce"})
async def messages(request: HttpRequest, queue: str) -> HttpResponse:
    if request.method == "POST":
        return await produce(request, queue)
    return await consume(request, queue)


async def produce(request: HttpRequest, queue: str) -> HttpResponse:
    await send_body(queue, body_of(request))
    return HttpResponse(status=204)


async def consume(request: HttpRequest, queue: str) -> HttpResponse:
    message = await take(queue)
    if message is None:
        return HttpResponse(status=204)
    response = JsonResponse(delivered(message))
    response[RECEIPT_HEADER] = str(message.receipt)
    return response


@endpoint("POST", action="consume")
async def ack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    await ack_receipt(queue, message_id, request.headers.get(RECEIPT_HEADER))
    return HttpResponse(status=204)


# What Forq's produce, consume and ack do, shared with the fast path (forqapp.api.fastpath), which
# answers them without Django's request and response.


async def send_body(queue: str, body: bytes) -> None:
    """Produce: ``body`` is Forq's ``{"content", "processAfter"?}``."""
    validation.v1_queue_name(queue, produce=True)  # Forq's contract: 64 characters
    data = json_object(body)
    await groupcommit.run(services.send, queue, data.get("content"), data.get("processAfter"))


async def take(queue: str) -> services.ReceivedMessage | None:
    """Consume: a long poll for the oldest due message, waiting up to ``FORQ_LONG_POLL_SECONDS``
    (None when none came, or when the server drains)."""
    validation.v1_queue_name(queue)
    return await waiting.claim_async(services.claim, queue, hot("FORQ_LONG_POLL_SECONDS"), nothing=None)


def delivered(message: services.ReceivedMessage) -> dict[str, str]:
    return {"id": message.id, "content": message.content, "receipt": str(message.receipt)}


async def ack_receipt(queue: str, message_id: str, receipt_header: str | None) -> None:
    delivery = Delivery.parse(validation.v1_queue_name(queue), message_id, receipt_header)
    await groupcommit.run(services.ack_delivery, delivery.queue, delivery.id, delivery.receipt)


@endpoint("POST", action="consume")
async def nack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    delivery = Delivery.parse(validation.v1_queue_name(queue), message_id, request.headers.get(RECEIPT_HEADER))
    await groupcommit.run(services.nack_delivery, delivery.queue, delivery.id, delivery.receipt)
    return HttpResponse(status=204)
