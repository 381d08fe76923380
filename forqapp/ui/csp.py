"""The Content-Security-Policy of the staff pages: forqapp's HTMX pages and the Django admin.

Everything a staff page runs or styles comes from the site's own static files: no inline script
(``forq.js`` holds the pages' code; ``copy.js``, shared with the admin, the copy buttons), no inline
style (htmx's own indicator ``<style>`` is turned off by the ``htmx-config`` meta tag of
``base.html``; its rules are in ``forq.css``), no ``eval``
(so no ``hx-on`` attributes and no ``js:`` values in ``hx-vals``/``hx-headers``: htmx evaluates
those, and this policy refuses). The Django admin's templates and scripts keep within it too.

forqapp's own pages carry the policy in any project (:func:`protect`, through ``ui_view``);
:class:`StaffPagesCSPMiddleware` gives it to the admin's pages (the demo project's ``MIDDLEWARE``
has it). A response that already has a ``Content-Security-Policy`` (a project's own, from Django
6's ``SECURE_CSP`` or django-csp) keeps it.

Not django-csp nor Django 6's ``SECURE_CSP``: the policy is one constant with no nonce, forqapp's
pages must carry it without the project configuring anything (on Django 5.2 as on 6.0), and either
of those would make it the policy of the project's whole site.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"

#: The policy, directive by directive. ``data:`` images: the admin's stylesheets draw a few icons as
#: data URLs. ``frame-ancestors 'none'``: as ``X-Frame-Options: DENY``.
DIRECTIVES: dict[str, str] = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
POLICY = "; ".join(f"{name} {value}" for name, value in DIRECTIVES.items())

#: The URL namespaces whose pages the middleware covers: the admin site's and forqapp's pages.
STAFF_NAMESPACES = frozenset({"admin", "forqapp-ui"})


def add_policy(response: HttpResponse) -> HttpResponse:
    """``response`` with the staff pages' policy, unless it has one already."""
    response.headers.setdefault(HEADER, POLICY)
    return response


def protect(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A view whose responses carry the staff pages' policy."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        return add_policy(view(request, *args, **kwargs))

    return wrapper


class StaffPagesCSPMiddleware:
    """The staff pages' policy on every page of the admin site (URL namespace ``admin``) and of
    forqapp's pages; other pages of the project are left alone. Place it anywhere in
    ``MIDDLEWARE``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and STAFF_NAMESPACES.intersection(match.namespaces):
            add_policy(response)
        return response
