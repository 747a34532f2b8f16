"""The signed "silence this job for 1 h" link a notification carries (issue 18).

The notifier signs it, the dashboard checks it: the two share a secret
(``TRAINWATCH_SILENCE_LINK_SECRET``) and this module, never each other's code. The link is a plain
URL, so it works in every channel, custom bots included:

    <dashboard>/silences/new?cluster=..&namespace=..&kind=..&name=..&uid=..&expires=<unix>&sig=<hex>

``sig`` is HMAC-SHA256(secret, the JSON array of the job's identity and ``expires``). JSON makes
the signed text unambiguous whatever characters the values hold. The link only names a job and
stops working at ``expires``; opening it creates nothing: the page it opens asks the signed-in
user to confirm (a GET alone must not change anything), and the silence is created with that
user's token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from urllib.parse import urlencode

LINK_PATH = "/silences/new"
VERSION = "v1"
_FIELDS = ("cluster", "namespace", "kind", "name", "uid")


class LinkRefused(ValueError):
    """A link whose signature does not match, that has expired, or that lacks a field."""


@dataclass(frozen=True, slots=True)
class JobIdentity:
    cluster: str
    namespace: str
    kind: str  # the kind key, e.g. pytorchjob
    name: str
    uid: str


def _signature(secret: str, job: JobIdentity, expires: int) -> str:
    text = json.dumps(
        [VERSION, job.cluster, job.namespace, job.kind, job.name, job.uid, expires],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def sign(secret: str, job: JobIdentity, *, expires: int) -> dict[str, str]:
    """The link's query parameters, signature included."""
    params = {name: getattr(job, name) for name in _FIELDS}
    params["expires"] = str(expires)
    params["sig"] = _signature(secret, job, expires)
    return params


def link(dashboard_url: str, secret: str, job: JobIdentity, *, expires: int) -> str:
    return f"{dashboard_url.rstrip('/')}{LINK_PATH}?{urlencode(sign(secret, job, expires=expires))}"


def verify(secret: str, params: dict[str, str], *, now: float | None = None) -> tuple[JobIdentity, int]:
    """The job a link names and when it expires; LinkRefused if it was altered or has expired."""
    if not secret:
        raise LinkRefused("silence links are not enabled here (no TRAINWATCH_SILENCE_LINK_SECRET)")
    missing = [name for name in (*_FIELDS, "expires", "sig") if not params.get(name)]
    if missing:
        raise LinkRefused(f"the link lacks {', '.join(missing)}")
    try:
        expires = int(params["expires"])
    except ValueError:
        raise LinkRefused("the link's expiry is not a number") from None
    job = JobIdentity(**{name: params[name] for name in _FIELDS})
    # Compared before the expiry is looked at, so an altered expiry says "altered".
    if not hmac.compare_digest(_signature(secret, job, expires), params["sig"]):
        raise LinkRefused("the link's signature does not match: it was altered or signed elsewhere")
    if (time.time() if now is None else now) >= expires:
        raise LinkRefused("the link has expired; open the job's page to silence it")
    return job, expires
