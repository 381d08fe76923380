"""AWS Signature Version 4 (``Authorization: AWS4-HMAC-SHA256 …``, or the same in the query
string: ``X-Amz-Algorithm``, ``X-Amz-Credential``, ``X-Amz-Signature``… of a presigned URL),
verified against :mod:`forqapp.keys`: the access key id is a scoped key's id (the root key,
``FORQ_AUTH_SECRET``, signs as ``forq-root``). The request's time may differ from the server's by
15 minutes at most; a presigned URL's is good from then for its ``X-Amz-Expires`` seconds.

:func:`parse` reads the header or the query string (before the body arrives); :func:`verify`
checks the signature over the canonical request once the body is in (constant-time compare; the
payload's hash is the body's, a form-encoded one included)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from .protocol import SqsError, given_twice

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_S = 15 * 60
MAX_EXPIRES_S = 7 * 24 * 3600  # a presigned URL's longest X-Amz-Expires (AWS's)
_CREDENTIAL = re.compile(r"([^/,\s]+)/(\d{8})/([a-z0-9-]{1,32})/([a-z0-9-]{1,32})/aws4_request")
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([a-z0-9-]{1,32})/([a-z0-9-]{1,32})/aws4_request\s*,"
    r"\s*SignedHeaders=([a-z0-9;._-]+)\s*,\s*Signature=([0-9a-f]{64})\s*")


@dataclass(frozen=True)
class Authorization:
    access_key_id: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    amz_date: str  # X-Amz-Date

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def _denied(shape: str, message: str) -> SqsError:
    return SqsError(shape, message, 403)


def query_parameters(query: str) -> dict[str, str]:
    """The query string's SigV4 parameters (``X-Amz-…``), decoded. One given twice is refused
    (``MalformedQueryString``), as any parameter given twice is: which one would be signed?"""
    out: dict[str, str] = {}
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        name = unquote(name)
        if name.startswith("X-Amz-"):
            if name in out:
                raise given_twice(name)
            out[name] = unquote(value.replace("+", " "))
    return out


def parse(headers: dict[str, list[str]], now: dt.datetime, query: str = "") -> Authorization:
    """The request's ``Authorization`` (or, with none, the query string's ``X-Amz-Signature`` and
    its parameters), checked for form and time (not yet for its signature)."""
    values = headers.get("authorization")
    if not values:
        params = query_parameters(query) if "X-Amz-" in query else {}
        if "X-Amz-Signature" in params or "X-Amz-Credential" in params:
            return _parse_query(params, headers, now)
        raise _denied("MissingAuthenticationToken", "Request is missing Authentication Token")
    match = _AUTH.fullmatch(values[0].strip())
    if match is None:
        raise _denied("IncompleteSignature", "The Authorization header is not a valid AWS Signature Version 4 "
                      "header (AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…)")
    key_id, date, region, service, signed, signature = match.groups()
    signed_headers = tuple(signed.split(";"))
    if "host" not in signed_headers or "x-amz-date" not in signed_headers:
        raise _denied("IncompleteSignature", "The signature must cover the host and x-amz-date headers")
    amz_date = (headers.get("x-amz-date") or [""])[0].strip()
    return _checked(headers, now, key_id, date, region, service, signed_headers, signature, amz_date)


def _parse_query(params: dict[str, str], headers: dict[str, list[str]], now: dt.datetime) -> Authorization:
    """A presigned URL's signature: ``X-Amz-Algorithm``, ``X-Amz-Credential``, ``X-Amz-Date``,
    ``X-Amz-Expires``, ``X-Amz-SignedHeaders`` and ``X-Amz-Signature`` in the query string."""
    missing = [name for name in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                                 "X-Amz-SignedHeaders", "X-Amz-Signature") if not params.get(name)]
    if missing:
        raise _denied("IncompleteSignature", f"The query string's signature lacks {', '.join(missing)}")
    match = _CREDENTIAL.fullmatch(params["X-Amz-Credential"])
    if params["X-Amz-Algorithm"] != ALGORITHM or match is None \
            or not re.fullmatch(r"[a-z0-9;._-]+", params["X-Amz-SignedHeaders"]) \
            or not re.fullmatch(r"[0-9a-f]{64}", params["X-Amz-Signature"]):
        raise _denied("IncompleteSignature", "The query string's signature is not a valid AWS Signature Version 4 "
                      "(X-Amz-Algorithm=AWS4-HMAC-SHA256, X-Amz-Credential=…, X-Amz-SignedHeaders=…, "
                      "X-Amz-Signature=…)")
    key_id, date, region, service = match.groups()
    signed_headers = tuple(params["X-Amz-SignedHeaders"].split(";"))
    if "host" not in signed_headers:
        raise _denied("IncompleteSignature", "The signature must cover the host header")
    expires = params["X-Amz-Expires"]
    if not expires.isdigit() or not 1 <= int(expires) <= MAX_EXPIRES_S:
        raise _denied("AuthorizationQueryParametersError", f"X-Amz-Expires must be between 1 and "
                      f"{MAX_EXPIRES_S} seconds")
    return _checked(headers, now, key_id, date, region, service, signed_headers, params["X-Amz-Signature"],
                    params["X-Amz-Date"], late_s=int(expires))


def _checked(headers: dict[str, list[str]], now: dt.datetime, key_id: str, date: str, region: str, service: str,
             signed_headers: tuple[str, ...], signature: str, amz_date: str,
             late_s: int | None = None) -> Authorization:
    """The signature's parts, checked: every x-amz-* header signed, the service, the time (within
    15 minutes of the server's; a presigned URL's: not in the future by more, nor expired)."""
    # As AWS: every x-amz-* header sent must be signed (X-Amz-Target names the action: unsigned,
    # a captured request could be replayed as another action).
    unsigned = sorted(name for name in headers if name.startswith("x-amz-") and name not in signed_headers)
    if unsigned:
        raise _denied("IncompleteSignature", f"The signature must cover every x-amz-* header of the request: "
                      f"{', '.join(unsigned)} not signed")
    if service != "sqs":
        raise _denied("SignatureDoesNotMatch", f"Credential should be scoped to correct service: 'sqs', not {service!r}")
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise _denied("IncompleteSignature", "X-Amz-Date must be YYYYMMDDTHHMMSSZ") from None
    if amz_date[:8] != date:
        raise _denied("SignatureDoesNotMatch", "The credential's date does not match X-Amz-Date")
    age = (now - when).total_seconds()
    if late_s is not None and age > late_s:
        raise _denied("AccessDenied", f"Request has expired: signed at {amz_date} for {late_s} s "
                      f"(the server's time: {now:%Y%m%dT%H%M%SZ}).")
    if late_s is None and abs(age) > MAX_SKEW_S or age < -MAX_SKEW_S:
        raise _denied("SignatureDoesNotMatch", f"Signature expired: {amz_date} is more than 15 minutes away from "
                      f"the server's time ({now:%Y%m%dT%H%M%SZ}).")
    return Authorization(key_id, date, region, service, signed_headers, signature, amz_date)


def _signing_key(secret: str, auth: Authorization) -> bytes:
    key = hmac.new(("AWS4" + secret).encode("utf-8"), auth.date.encode(), hashlib.sha256).digest()
    for part in (auth.region, auth.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def canonical_request(method: str, raw_path: str, query: str, headers: dict[str, list[str]],
                      signed_headers: tuple[str, ...], body: bytes) -> str:
    """As botocore builds it for every service but S3: the path normalised and URI-encoded, the
    query pairs sorted as sent, each signed header's values trimmed and joined by commas."""
    path = posixpath.normpath(raw_path or "/")
    if raw_path.endswith("/") and path != "/":
        path += "/"
    path = "/" + path.lstrip("/")
    pairs = sorted(tuple(p.partition("=")[::2]) for p in query.split("&") if p) if query else []
    pairs = [(k, v) for k, v in pairs if k != "X-Amz-Signature"]  # (a presigned URL's: not signed over itself)
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    canonical_headers = "".join(
        f"{name}:{','.join(' '.join(v.split()) for v in headers.get(name, []))}\n" for name in signed_headers)
    return "\n".join([method, quote(path, safe="/~"), canonical_query, canonical_headers,
                      ";".join(signed_headers), hashlib.sha256(body).hexdigest()])


def signature(secret: str, auth: Authorization, request: str) -> str:
    to_sign = "\n".join([ALGORITHM, auth.amz_date, auth.scope, hashlib.sha256(request.encode("utf-8")).hexdigest()])
    return hmac.new(_signing_key(secret, auth), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(secret: str, auth: Authorization, request: str) -> bool:
    """Whether ``auth``'s signature is the one ``secret`` makes for ``request`` (constant time)."""
    return hmac.compare_digest(signature(secret, auth, request), auth.signature)
