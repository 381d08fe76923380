"""Django admin for scoped API keys: list (grants, state, last use), add (the secret shown once, on
the page that answers the form, never stored or sent through messages), change grants and expiry,
and actions revoke, rotate, disable, enable behind a confirmation page. Every change goes through
:mod:`forqapp.keys.service`, which writes its audit event (shown inline, read-only); keys are never
deleted (the audit log stays)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from ..admin import cells as admin_cells
from ..utils import ms_to_datetime, now_ms
from . import grants, service
from .cli import parse_expires
from .models import ApiKey

GRANTS_HELP = ("One grant per line, PATTERN:ACTION[,ACTION]. Patterns: a queue name, PREFIX.* (PREFIX- * and "
               "PREFIX_* too) or *; add +dlq to cover the dead-letter queues (orders+dlq:consume). Actions: "
               "produce, consume, manage, read.")


def _dt(ms: int | None) -> str:
    when = ms_to_datetime(ms)
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(ms: int | None) -> str:
    return admin_cells.when(ms, empty="never")


class KeyForm(forms.ModelForm):
    # Full-width fields (admin.css), each placeholder whole.
    grants_text = forms.CharField(
        label="Grants", help_text=GRANTS_HELP,
        widget=forms.Textarea(attrs={"rows": 4, "class": "forq-wide",
                                     "placeholder": "orders:produce\nreports.*:read\norders+dlq:consume"}))
    expires = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"class": "forq-wide",
                                                      "placeholder": "90d, 12h, 30m or 2027-01-01 00:00 (empty: never)"}),
        help_text="a duration from now (90d, 12h, 30m) or a date and time, UTC unless it says (YYYY-MM-DD HH:MM); "
                  "empty: never")

    class Meta:
        model = ApiKey
        fields = ("name",)
        widgets = {"name": forms.TextInput(attrs={"class": "forq-wide", "placeholder": "orders-producer"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["grants_text"].initial = "\n".join(self.instance.grants)
            when = ms_to_datetime(self.instance.expires_at)
            self.fields["expires"].initial = "" if when is None else when.strftime("%Y-%m-%d %H:%M:%S")

    def clean_grants_text(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["grants_text"].splitlines() if line.strip()]
        try:
            return grants.dumps(grants.parse_all(lines))
        except grants.GrantError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_expires(self) -> int | None:
        """As the keys page and ``forq_keys --expires`` take it (:func:`forqapp.keys.cli.parse_expires`)."""
        value = (self.cleaned_data.get("expires") or "").strip()
        if not value:
            return None
        try:
            ms = parse_expires(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if ms <= now_ms() and "expires" in self.changed_data:
            raise forms.ValidationError("the expiry is in the past")
        return ms


def _confirm(modeladmin, request, queryset, *, action: str, verb: str, question: str):
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Are you sure?", "opts": modeladmin.model._meta, "keys": list(queryset), "action": action,
        "verb": verb, "question": question, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "forqapp/admin/confirm_keys.html", context)


def _issued_page(modeladmin, request, issued: list[service.Issued], what: str):
    context = {**modeladmin.admin_site.each_context(request), "title": what, "opts": modeladmin.model._meta,
               "issued": issued}
    response = TemplateResponse(request, "forqapp/admin/key_issued.html", context)
    response["Cache-Control"] = "no-store"
    return response


def _actor(request) -> str:
    return request.user.get_username()


@admin.action(description="Revoke selected keys (for good)", permissions=["change"])
def revoke_keys(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="revoke_keys", verb="Revoke",
                        question="These keys stop working for good (within seconds on every server):")
    n = sum(service.revoke(k, actor=_actor(request), via="admin") for k in queryset)
    modeladmin.message_user(request, f"Revoked {n} key{'s' if n != 1 else ''}.", messages.SUCCESS)
    return None


@admin.action(description="Rotate selected keys (new secrets, shown once)", permissions=["change"])
def rotate_keys(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="rotate_keys", verb="Rotate",
                        question="These keys get a new secret; their current secret stops working:")
    issued = []
    for key in queryset:
        try:
            issued.append(service.rotate(key, actor=_actor(request), via="admin"))
        except service.KeyError_ as exc:
            modeladmin.message_user(request, str(exc), messages.WARNING)
    return _issued_page(modeladmin, request, issued, "New secrets") if issued else None


@admin.action(description="Disable selected keys", permissions=["change"])
def disable_keys(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="disable_keys", verb="Disable",
                        question="These keys stop working until enabled again:")
    _set_enabled(modeladmin, request, queryset, False)
    return None


@admin.action(description="Enable selected keys", permissions=["change"])
def enable_keys(modeladmin, request, queryset):
    _set_enabled(modeladmin, request, queryset, True)


def _set_enabled(modeladmin, request, queryset, enabled: bool) -> None:
    """Enable or disable each selected key; a revoked one is named and left as it is."""
    n = 0
    for key in queryset:
        try:
            n += service.set_enabled(key, enabled, actor=_actor(request), via="admin")
        except service.KeyError_ as exc:
            modeladmin.message_user(request, str(exc), messages.WARNING)
    verb = "Enabled" if enabled else "Disabled"
    modeladmin.message_user(request, f"{verb} {n} key{'s' if n != 1 else ''}.", messages.SUCCESS)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = KeyForm
    list_display = ("name", "access_key_id_cell", "grant_list", "state", "expires_on", "last_used_on", "created_on")
    search_fields = ("name", "access_key_id")
    actions = (revoke_keys, rotate_keys, disable_keys, enable_keys)

    @property
    def media(self):
        return super().media + admin_cells.MEDIA

    @admin.display(description="access key id", ordering="access_key_id")
    def access_key_id_cell(self, obj: ApiKey) -> str:
        return format_html('<code class="forq-id">{}</code>', obj.access_key_id)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("name", "grants_text", "expires")
        return ("name", "access_key_id", "state", "grants_text", "expires", "created", "last_used", "audit_log")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("name", "access_key_id", "state", "created", "last_used", "audit_log")

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the audit log stays

    @admin.display(description="grants")
    def grant_list(self, obj: ApiKey) -> str:
        return format_html_join(mark_safe("<br>"), "<code>{}</code>", ((g,) for g in obj.grants))

    @admin.display(description="state")
    def state(self, obj: ApiKey) -> str:
        return service.state(obj)

    # The list's dates are compact (the full date in their tooltip); the key's page has them whole.
    @admin.display(description="expires", ordering="expires_at")
    def expires_on(self, obj: ApiKey) -> str:
        return _when(obj.expires_at)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used_on(self, obj: ApiKey) -> str:
        return _when(obj.last_used_at)

    @admin.display(description="created", ordering="created_at")
    def created_on(self, obj: ApiKey) -> str:
        return format_html('{} <span class="quiet">by {}</span>', _when(obj.created_at), obj.created_by or "—")

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, obj: ApiKey) -> str:
        return _dt(obj.last_used_at) if obj.last_used_at else "never"

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ApiKey) -> str:
        return format_html("{} by {}", _dt(obj.created_at), obj.created_by or "—")

    @admin.display(description="audit log")
    def audit_log(self, obj: ApiKey) -> str:
        events = obj.events.all()[:200]
        if not events:
            return "—"
        return format_html("<table><tr><th>at</th><th>change</th><th>by</th><th>via</th><th>detail</th></tr>{}</table>",
                           format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                                            ((_dt(e.at), e.action, e.actor, e.via, e.detail) for e in events)))

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            service.update(obj, grant_texts=data["grants_text"], expires_at=data["expires"], actor=_actor(request),
                           via="admin")
            return
        try:
            issued = service.create(data["name"], data["grants_text"], expires_at=data["expires"],
                                    actor=_actor(request), via="admin")
        except service.KeyError_ as exc:  # e.g. the name was taken meanwhile
            raise forms.ValidationError(str(exc)) from None
        obj.pk = issued.key.pk
        request._forq_issued = issued  # for response_add: shown once, on the answer to this form

    def save_related(self, request, form, formsets, change):
        pass  # no related objects are edited here (events are the service's)

    def log_addition(self, request, obj, message):
        pass  # the service wrote its audit event (forq_api_key_events)

    log_change = log_addition

    def response_add(self, request, obj, post_url_continue=None):
        issued = getattr(request, "_forq_issued", None)
        if issued is None:
            return super().response_add(request, obj, post_url_continue)
        return _issued_page(self, request, [issued], "API key created")
