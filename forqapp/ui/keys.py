"""The HTMX page of scoped API keys (staff only): the keys with their grants, state and last use;
create (the secret shown once, in the answer, with ``Cache-Control: no-store``), revoke and rotate
(each behind a confirmation: htmx's ``hx-confirm``, or, posted without htmx, a confirmation page:
:mod:`forqapp.ui.confirm`). Every change goes through :mod:`forqapp.keys.service` (its audit
event). Every action answers with the page's partial (htmx) or the whole page, never a redirect:
the secret must not travel through the session's messages."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse

from ..keys import cli, service
from ..keys.models import ApiKey
from ..utils import ms_to_datetime, now_ms
from . import confirm
from .views import HtmxHttpRequest, _partial, ui_view


def _rows(now: int) -> list[dict]:
    return [{"key": k, "state": service.state(k, now), "expires": ms_to_datetime(k.expires_at),
             "last_used": ms_to_datetime(k.last_used_at), "created": ms_to_datetime(k.created_at)}
            for k in ApiKey.objects.all()]


def _answer(request: HtmxHttpRequest, *, issued: service.Issued | None = None,
            flash: tuple[str, str] | None = None, form: dict | None = None, status: int = 200) -> HttpResponse:
    context = {"rows": _rows(now_ms()), "issued": issued, "flash": flash, "form": form or {}}
    template = "forqapp/_keys.html" if _partial(request) else "forqapp/keys.html"
    response = render(request, template, context, status=status)
    if issued is not None:
        response["Cache-Control"] = "no-store"
    return response


def _actor(request: HtmxHttpRequest) -> str:
    return request.user.get_username()


@ui_view("GET", needs=("view", "apikey"))
def keys_page(request: HtmxHttpRequest) -> HttpResponse:
    return _answer(request)


@ui_view("POST", needs=("add", "apikey"))
def create_key(request: HtmxHttpRequest) -> HttpResponse:
    form = {"name": request.POST.get("name", ""), "grants": request.POST.get("grants", ""),
            "expires": request.POST.get("expires", "")}
    lines = [line.strip() for line in form["grants"].replace(" ", "\n").splitlines() if line.strip()]
    try:
        expires_at = cli.parse_expires(form["expires"]) if form["expires"].strip() else None
        issued = service.create(form["name"], lines, expires_at=expires_at, actor=_actor(request), via="ui")
    except (ValueError, service.KeyError_) as exc:  # parse_expires raises ValueError
        return _answer(request, flash=("error", str(exc)), form=form, status=400 if not request.htmx else 200)
    return _answer(request, issued=issued, flash=("success", f"Created {issued.key.name}."))


def _key(ref: str) -> ApiKey | None:
    return ApiKey.objects.filter(access_key_id=ref).first()


@ui_view("POST", needs=("change", "apikey"))
def revoke_key(request: HtmxHttpRequest, access_key_id: str) -> HttpResponse:
    key = _key(access_key_id)
    if key is None:
        return _answer(request, flash=("error", "No such key."))
    if confirm.needed(request):
        return confirm.page(request, title=f"Revoke {key.name}", label="Revoke", back=reverse("forqapp-ui:keys"),
                            question=f"Revoke {key.name} for good? Its clients are refused within seconds.")
    done = service.revoke(key, actor=_actor(request), via="ui")
    return _answer(request, flash=("success", f"Revoked {key.name}: it stops working within seconds."
                                   if done else f"{key.name} was revoked already."))


@ui_view("POST", needs=("change", "apikey"))
def rotate_key(request: HtmxHttpRequest, access_key_id: str) -> HttpResponse:
    key = _key(access_key_id)
    if key is None:
        return _answer(request, flash=("error", "No such key."))
    if confirm.needed(request):
        return confirm.page(request, title=f"Rotate {key.name}", label="Rotate", back=reverse("forqapp-ui:keys"),
                            question=f"Rotate {key.name}? It gets a new secret; the current one stops working.")
    try:
        issued = service.rotate(key, actor=_actor(request), via="ui")
    except service.KeyError_ as exc:
        return _answer(request, flash=("error", str(exc)))
    return _answer(request, issued=issued, flash=("success", f"Rotated {key.name}: its old secret no longer works."))
