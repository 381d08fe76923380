"""Forq's HTTP API (the messages of one queue) as async Django views.

Each view validates the request (:mod:`forqapp.validation`; queue names by Forq's v1 rule, at most
64 characters, where forqapp's other faces take 80), calls one service function and maps the
outcome to Forq's status codes; what every view shares (method, key, errors, headers) is
:mod:`forqapp.api.plumbing`'s. ``forq_serve`` routes these paths straight to the views
(:mod:`forqapp.api.asgi`); mounted with ``include("forqapp.urls")`` they run under any Django server.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import groupcommit, services, validation, waiting
from ..conf import hot
from .plumbing import RECEIPT_HEADER, endpoint, json_body, receipt


@endpoint("GET", "POST", waits=("GET",), action={"GET": "consume", "POST": "produce"})
async def messages(request: HttpRequest, queue: str) -> HttpResponse:
    if request.method == "POST":
        return await produce(request, queue)
    return await consume(request, queue)


async def produce(request: HttpRequest, queue: str) -> HttpResponse:
    validation.v1_queue_name(queue, produce=True)  # Forq's contract: 64 characters
    body = json_body(request)
    await groupcommit.run(services.send, queue, body.get("content"), body.get("processAfter"))
    return HttpResponse(status=204)


async def consume(request: HttpRequest, queue: str) -> HttpResponse:
    """A long poll: the oldest due message, waiting up to ``FORQ_LONG_POLL_SECONDS`` for one (204
    when none came, or when the server drains)."""
    validation.v1_queue_name(queue)
    message = await waiting.claim_async(services.claim, queue, hot("FORQ_LONG_POLL_SECONDS"))
    if message is None:
        return HttpResponse(status=204)
    response = JsonResponse({"id": message.id, "content": message.content, "receipt": str(message.receipt)})
    response[RECEIPT_HEADER] = str(message.receipt)
    return response


@endpoint("POST", action="consume")
async def ack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    await groupcommit.run(services.ack_delivery, *_delivery(request, queue, message_id))
    return HttpResponse(status=204)


@endpoint("POST", action="consume")
async def nack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    await groupcommit.run(services.nack_delivery, *_delivery(request, queue, message_id))
    return HttpResponse(status=204)


def _delivery(request: HttpRequest, queue: str, message_id: str) -> tuple[str, str, int]:
    return validation.v1_queue_name(queue), validation.message_id(message_id), receipt(request)
