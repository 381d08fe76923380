"""Confirmation without JavaScript. The HTMX pages ask before a destructive action with
``hx-confirm`` (a dialog, in the browser); a POST without ``HX-Request`` (a plain form submit, with
JavaScript off, or a script) has asked nobody, so it answers a server-rendered confirmation page
instead of acting: the question, and a Confirm button that posts the same form again with
``confirmed=yes`` (CSRF token included). HTMX requests act as before."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpResponse
from django.shortcuts import render

if TYPE_CHECKING:
    from .views import HtmxHttpRequest

CONFIRMED = "yes"


def needed(request: HtmxHttpRequest) -> bool:
    """True when ``request`` must be confirmed first: not htmx (whose ``hx-confirm`` asked), not a
    confirmation page's post."""
    return not request.htmx and request.POST.get("confirmed") != CONFIRMED


def page(request: HtmxHttpRequest, *, title: str, question: str, label: str, back: str,
         danger: bool = True, keep: tuple[str, ...] = ()) -> HttpResponse:
    """The confirmation page: ``question`` (escaped, as every value), Confirm (``label``) posting to
    the request's own URL with ``confirmed=yes`` (and the posted fields named in ``keep``, as
    given), and Cancel (a link to ``back``). Nothing changed."""
    kept = [(name, request.POST[name]) for name in keep if request.POST.get(name)]
    context = {"title": title, "question": question, "label": label, "back": back, "danger": danger,
               "action": request.get_full_path(), "confirmed": CONFIRMED, "kept": kept}
    response = render(request, "forqapp/confirm.html", context)
    response["Cache-Control"] = "no-store"
    return response
