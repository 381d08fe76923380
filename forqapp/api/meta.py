"""The API's endpoints about the server itself: ``/healthcheck``, ``/metrics`` (Prometheus) and
``/api/v1/openapi.json`` (the document that describes every route of :mod:`forqapp.api.urls`, also
served as ``/api/v2/openapi.json``)."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from .. import errors, services
from ..conf import forq_settings
from ..metrics import exposition
from .plumbing import endpoint, error_response, secure

HERE = Path(__file__).parent


@endpoint("GET", "HEAD", key=None)
async def healthcheck(request: HttpRequest) -> HttpResponse:
    """204 when the database answered a ping within 2 s (``services.HEALTH_TIMEOUT_S``), else 503
    at once, with one log line a second saying why."""
    if await services.health() is None:
        return HttpResponse(status=204)
    return error_response(errors.UNHEALTHY)


@endpoint("GET", key="FORQ_METRICS_AUTH_SECRET")
async def metrics(request: HttpRequest) -> HttpResponse:
    # Off the event loop: reading every process's files and folding thousands of queues takes tens
    # of milliseconds, which the API's other requests would wait out.
    body, content_type = await asyncio.to_thread(exposition)
    return HttpResponse(body, content_type=content_type)


@csrf_exempt
async def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: 404 unless ``FORQ_METRICS_ENABLED`` (checked before the key)."""
    if not forq_settings.FORQ_METRICS_ENABLED:
        return secure(HttpResponse(status=404))
    return await metrics(request)


# Merged into openapi.json, in this order: the bulk endpoints' paths, then the v2 API's.
PARTS = ("openapi_bulk.json", "openapi_v2.json")


def openapi_document() -> dict[str, Any]:
    """forqapp/api/openapi.json, with the paths, components and tags of :data:`PARTS` merged in."""
    document = json.loads((HERE / "openapi.json").read_text())
    for name in PARTS:
        part = HERE / name
        if not part.exists():
            continue
        extra = json.loads(part.read_text())
        document["paths"].update(extra.get("paths", {}))
        for kind, items in extra.get("components", {}).items():
            document["components"].setdefault(kind, {}).update(items)
        if extra.get("tags"):
            document.setdefault("tags", []).extend(extra["tags"])
    return document


@functools.cache
def _openapi_bytes() -> bytes:
    return json.dumps(openapi_document()).encode()


@endpoint("GET", key=None)
async def openapi(request: HttpRequest) -> HttpResponse:
    return HttpResponse(_openapi_bytes(), content_type="application/json")
