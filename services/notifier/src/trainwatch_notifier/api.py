"""The notifier's admin API on its HTTP port: silences and what they suppressed (issue 18).

Tokens are the platform's (``TRAINWATCH_ADMIN_TOKENS`` / ``TRAINWATCH_VIEWER_TOKENS``, as the
registry's and the persister's APIs take them): creating or expiring a silence needs an admin
token, listing a viewer's (or an admin's). Every change is logged with the short id of the token
that made it, never the token.

    POST /v1/silences                  create (admin)         201 the silence
    GET  /v1/silences?state=           list, newest first (viewer): active | expired | all
    GET  /v1/silences/{id}             one (viewer)
    POST /v1/silences/{id}/expire      end it now (admin); nothing it suppressed is re-sent
    GET  /v1/suppressions?silence_id=  what silences held back, newest first (viewer)
    GET  /v1/dead-letters?after=&reason=  what the notifier gave up on, oldest first (viewer)
    POST /v1/dead-letters/{seq}/replay    send it again through its channel (admin)
    GET  /v1/digests/{id}                 the jobs one digest sent, in its order (viewer)
"""

# No "from __future__ import annotations": FastAPI reads the dependencies' annotations at run time.
import logging
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field, model_validator

from trainwatch_common import parse_job_event
from trainwatch_common.api_auth import bearer_scheme, client_address, require_role
from trainwatch_common.auth import Role, token_id
from trainwatch_notifier.deadletter import DeadLetter, DeadLetterBox
from trainwatch_notifier.digest_store import DigestStore
from trainwatch_notifier.replay import Replayer, ReplayRefused
from trainwatch_notifier.silence_store import SilenceStore
from trainwatch_notifier.silences import MAX_DURATION_SECONDS, Matchers, Silence

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1")
_bearer = bearer_scheme("A token from TRAINWATCH_{ADMIN,VIEWER}_TOKENS")
AdminDep = Annotated[Role, Depends(require_role(Role.ADMIN, _bearer, log))]
ViewerDep = Annotated[Role, Depends(require_role(Role.VIEWER, _bearer, log))]


def _store(request: Request) -> SilenceStore:
    store: SilenceStore | None = getattr(request.app.state, "silences", None)
    if store is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the notifier is starting or stopping")
    return store


StoreDep = Annotated[SilenceStore, Depends(_store)]


def _actor(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    return token_id(credentials.credentials) if credentials else "-"


ActorDep = Annotated[str, Depends(_actor)]


class SilenceRequest(BaseModel):
    model_config = {"extra": "forbid"}

    matchers: Matchers
    reason: str = Field(min_length=1, max_length=2000)
    author: str | None = Field(
        None, max_length=200, description="Who asks; the token's id when left out (and always recorded)"
    )
    duration_seconds: int | None = Field(None, gt=0, le=MAX_DURATION_SECONDS)
    ends_at: datetime | None = Field(None, description="Instead of duration_seconds; with a time zone")

    @model_validator(mode="after")
    def _one_end(self) -> "SilenceRequest":
        if (self.duration_seconds is None) == (self.ends_at is None):
            raise ValueError("give exactly one of duration_seconds and ends_at")
        if self.ends_at is not None and self.ends_at.tzinfo is None:
            raise ValueError("ends_at needs a time zone (e.g. 2026-12-01T20:00:00Z)")
        return self


class SilenceView(BaseModel):
    id: str
    state: Literal["active", "expired"]
    matchers: Matchers
    author: str
    created_by: str
    reason: str
    created_at: datetime
    ends_at: datetime
    expired_by: str | None

    @classmethod
    def of(cls, silence: Silence, now: datetime) -> "SilenceView":
        return cls(
            state=silence.state(now), **silence.model_dump(exclude={"matchers"}), matchers=silence.matchers
        )


@router.post("/silences", status_code=status.HTTP_201_CREATED, response_model=SilenceView)
async def create_silence(
    body: SilenceRequest, request: Request, store: StoreDep, _: AdminDep, actor: ActorDep
) -> SilenceView:
    now = store.clock()
    ends_at = (
        body.ends_at if body.ends_at is not None else now + timedelta(seconds=body.duration_seconds or 0)
    )
    if ends_at <= now:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "ends_at is in the past")
    if ends_at - now > timedelta(seconds=MAX_DURATION_SECONDS):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "a silence lasts at most 90 days")
    author = (body.author or "").strip() or f"token:{actor}"
    silence = await store.create(
        body.matchers, author=author, created_by=actor, reason=body.reason.strip(), ends_at=ends_at
    )
    log.info(
        "silence created",
        extra={
            "silence": silence.id,
            "actor": actor,
            "client": client_address(request),
            "until": str(ends_at),
        },
    )
    return SilenceView.of(silence, store.clock())


@router.get("/silences")
async def list_silences(
    store: StoreDep,
    _: ViewerDep,
    state: Literal["active", "expired", "all"] = "all",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    now = store.clock()
    found = await store.list_silences(state, limit=limit)
    return {"items": [SilenceView.of(s, now).model_dump(mode="json") for s in found]}


@router.get("/silences/{silence_id}", response_model=SilenceView)
async def get_silence(silence_id: str, store: StoreDep, _: ViewerDep) -> SilenceView:
    silence = await store.get(silence_id)
    if silence is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no silence {silence_id!r}")
    return SilenceView.of(silence, store.clock())


@router.post("/silences/{silence_id}/expire", response_model=SilenceView)
async def expire_silence(
    silence_id: str, request: Request, store: StoreDep, _: AdminDep, actor: ActorDep
) -> SilenceView:
    silence = await store.expire(silence_id, by=actor)
    if silence is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no silence {silence_id!r}")
    log.info(
        "silence expired", extra={"silence": silence_id, "actor": actor, "client": client_address(request)}
    )
    return SilenceView.of(silence, store.clock())


@router.get("/suppressions")
async def list_suppressions(
    store: StoreDep,
    _: ViewerDep,
    silence_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[int | None, Query(ge=1, description="The id of the previous page's last row")] = None,
) -> dict[str, Any]:
    items = await store.suppressions(silence_id=silence_id, limit=limit, before=before)
    next_before = items[-1]["id"] if len(items) == limit else None
    return {
        "items": [{**item, "suppressed_at": item["suppressed_at"].isoformat()} for item in items],
        "next_before": next_before,
    }


# -- dead letters (issue 18 item 6) ----------------------------------------------------------
def _box(request: Request) -> DeadLetterBox:
    box: DeadLetterBox | None = getattr(request.app.state, "dead_letters", None)
    if box is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the notifier is starting or stopping")
    return box


def _replayer(request: Request) -> Replayer:
    replayer: Replayer | None = getattr(request.app.state, "replayer", None)
    if replayer is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the notifier is starting or stopping")
    return replayer


class DeadLetterView(BaseModel):
    seq: int
    reason: str
    channel: str
    event_id: str
    detail: str
    dead_lettered_at: datetime | None
    job: dict[str, Any] | None = Field(
        None, description="cluster, namespace, kind, name and phase, if readable"
    )

    @classmethod
    def of(cls, letter: DeadLetter) -> "DeadLetterView":
        return cls(
            seq=letter.seq,
            reason=letter.reason,
            channel=letter.channel,
            event_id=letter.event_id,
            detail=letter.detail,
            dead_lettered_at=letter.time,
            job=_job_summary(letter.payload),
        )


def _job_summary(payload: bytes) -> dict[str, Any] | None:
    try:
        event = parse_job_event(payload)
    except Exception:  # a malformed event's letter: shown without its job
        return None
    job = event.job
    return {
        "cluster_id": job.cluster_id,
        "namespace": job.namespace,
        "kind": job.kind,
        "name": job.name,
        "uid": job.uid,
        "phase": event.phase.value,
        "sequence": event.sequence,
    }


@router.get("/dead-letters")
async def list_dead_letters(
    request: Request,
    _: ViewerDep,
    after: Annotated[int, Query(ge=0, description="The previous page's next_after")] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    reason: Annotated[str | None, Query(max_length=100, pattern=r"^[-a-z0-9]+$")] = None,
) -> dict[str, Any]:
    letters = await _box(request).page(after=after, limit=limit, reason=reason)
    return {
        "items": [DeadLetterView.of(letter).model_dump(mode="json") for letter in letters],
        "next_after": letters[-1].seq if len(letters) == limit else None,
    }


@router.post("/dead-letters/{seq}/replay")
async def replay_dead_letter(seq: int, request: Request, _: AdminDep, actor: ActorDep) -> dict[str, Any]:
    try:
        result = await _replayer(request).replay(seq)
    except ReplayRefused as exc:
        code = status.HTTP_404_NOT_FOUND if exc.missing else status.HTTP_409_CONFLICT
        raise HTTPException(code, str(exc)) from None
    log.info(
        "dead letter replayed",
        extra={
            "seq": seq,
            "channel": result.letter.channel,
            "event_id": result.letter.event_id,
            "outcome": result.outcome,
            "actor": actor,
            "client": client_address(request),
        },
    )
    return {"outcome": result.outcome, "detail": result.detail, "letter": DeadLetterView.of(result.letter)}


# -- digests (issue 18 item 5) ---------------------------------------------------------------
@router.get("/digests/{digest_id}")
async def get_digest(
    digest_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")], request: Request, _: ViewerDep
) -> dict[str, Any]:
    store: DigestStore | None = getattr(request.app.state, "digests", None)
    if store is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the notifier is starting or stopping")
    digest = await store.get(digest_id)
    if digest is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such digest (they are kept 30 days)")
    return digest
