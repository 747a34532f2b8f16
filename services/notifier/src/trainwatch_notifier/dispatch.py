"""Per-channel workers: claim, rate-limit, send (one message or a digest), retry, settle.

One worker (one task) per channel sends in order, so a job's Failed never overtakes its
Restarting. A message is settled (and acked by the consumer once all its channels are) only
after its send is confirmed and recorded, or after it was definitively dropped (duplicate,
dead letter).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from trainwatch_common import JobStatusEvent
from trainwatch_notifier import metrics
from trainwatch_notifier.channel_health import ChannelHealth
from trainwatch_notifier.channels.base import (
    ATTEMPT,
    Attempt,
    Body,
    Channel,
    ChannelRefusedError,
    PermanentSendError,
    RateLimitedError,
    RetryableSendError,
)
from trainwatch_notifier.clock import Clock, Sleep
from trainwatch_notifier.deadletter import DeadLetters
from trainwatch_notifier.dedupe import Claim, IdempotencyKeys, MarkersUnavailable
from trainwatch_notifier.digest import BurstDetector
from trainwatch_notifier.digest_store import DigestStore
from trainwatch_notifier.limits import BotLimits, Bucket, Token
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, job_link
from trainwatch_notifier.rules import Delivery, Owner

log = logging.getLogger(__name__)

T = TypeVar("T")


class Settler(Protocol):
    """The consumer's handle on one message: each channel settles it once (repeats are ignored)."""

    async def settle(self, channel: str, *, retry: bool) -> None: ...


IN_FLIGHT_CHECK_SECONDS = 0.1  # how often a digest being collected looks at the in-flight limit


@dataclass(frozen=True, slots=True)
class Item:
    event: JobStatusEvent
    payload: bytes  # the CloudEvent as received, for dead letters
    delivery: Delivery
    message: Settler
    queued_at: float = field(default_factory=time.monotonic)  # for a digest's "N updates in Xs"


@dataclass
class WorkerDeps:
    keys: IdempotencyKeys
    deadletters: DeadLetters
    limits: BotLimits
    dashboard_url: str
    cluster_name: Callable[[str], str]
    retry_base_seconds: float = 1.0
    retry_cap_seconds: float = 60.0
    retry_max_seconds: float = 600.0
    unconfirmed_after_seconds: float = 120.0
    unconfirmed_policy: Literal["deadletter", "resend"] = "resend"
    clock: Clock = time.monotonic
    sleep: Sleep = asyncio.sleep
    # Test seam: awaited after a send is recorded as sent and before its messages are settled.
    after_sent: Callable[[list[str]], Awaitable[None]] | None = None
    jitter: Callable[[], float] = field(default=random.random)
    # Set while the consumer holds as many events as it may (``max_in_flight``): it fetches no
    # more until some are settled, so a digest being collected is sent at once instead of waiting
    # out its hold (which capped a burst at max_in_flight events per hold_seconds).
    in_flight_full: asyncio.Event = field(default_factory=asyncio.Event)
    # The signed "silence this job for 1 h" link of a job's cards, or None (no link secret).
    silence_link: Callable[[JobStatusEvent], str | None] = field(default=lambda _event: None)
    # Channels whose bot refuses them outright (wrong secret...): /readyz, one log line a minute.
    health: ChannelHealth = field(default_factory=ChannelHealth)
    # Where each digest's jobs are recorded for its dashboard view; None: digests link the dashboard.
    digests: DigestStore | None = None


def mention_for(owner: Owner | None, channel_type: str) -> Mention | None:
    if owner is None:
        return None
    ids = owner.ids
    if ids is None:
        return Mention(owner.display_name, None)
    if channel_type == "dingtalk":
        return Mention(owner.display_name, ids.dingtalk, mobile=ids.dingtalk_mobile)
    user_id = {"feishu": ids.feishu, "slack": ids.slack, "wecom": ids.wecom}.get(channel_type)
    return Mention(owner.display_name, user_id)


@dataclass
class Lane:
    """One sequential sender of a channel: the jobs hashed to it keep their order."""

    queue: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    busy: bool = False
    # Our idempotency keys for the delivery under way, as they are in the KV bucket: "held" while we wait
    # (a crash then loses nothing), "sending" while a request may be out (its outcome unknown).
    claims: list[Claim] = field(default_factory=list)
    # Taken over from a sender that died with a request out: the bot may have it already, so each
    # attempt says it is a resend (under the same idempotency key).
    resend: bool = False


class ClaimLost(Exception):
    """Another sender took one of our deliveries over (we looked dead to it): it sends, not us."""


class ChannelWorker:
    def __init__(self, channel: Channel, deps: WorkerDeps) -> None:
        self.deps = deps
        self.lanes = [Lane() for _ in range(channel.config.concurrency)]
        self.retiring = False
        self.channel = channel
        self._bucket: Bucket
        self._burst: BurstDetector
        self.update(channel)

    @property
    def name(self) -> str:
        return self.channel.name

    def update(self, channel: Channel) -> None:
        """Take a changed configuration; items already queued are rendered with it."""
        self.channel = channel
        config = channel.config
        self._bucket = self.deps.limits.bucket(config.bot_key(), config.limits)
        digest = config.digest
        burst = getattr(self, "_burst", None)
        # Keep the recent-send history across reloads that leave the digest settings alone.
        if burst is None or (burst.threshold, burst.window_seconds) != (
            digest.threshold,
            digest.window_seconds,
        ):
            self._burst = BurstDetector(
                threshold=digest.threshold, window_seconds=digest.window_seconds, clock=self.deps.clock
            )

    def idle(self) -> bool:
        return all(not lane.busy and lane.queue.empty() for lane in self.lanes)

    def submit(self, item: Item) -> None:
        """Queue an item on its job's lane (one lane unless the channel has concurrency > 1)."""
        lane = zlib.crc32(item.event.job.uid.encode()) % len(self.lanes) if len(self.lanes) > 1 else 0
        self.lanes[lane].queue.put_nowait(item)

    async def run(self, lane_index: int = 0) -> None:
        lane = self.lanes[lane_index]
        while not (self.retiring and lane.queue.empty()):
            item = await lane.queue.get()
            lane.busy = True
            batch = [item]
            try:
                config = self.channel.config
                if config.digest_enabled and self._burst.in_burst(waiting=1 + lane.queue.qsize()):
                    batch += await self._collect(lane.queue, config.digest.hold_seconds)
                await self._deliver(batch, lane)
            except asyncio.CancelledError:
                raise
            except Exception:  # a task boundary: never lose the worker, let the events come back
                log.exception("channel worker failed a batch", extra={"channel": self.name})
                for failed in batch:
                    await failed.message.settle(self.name, retry=True)
            finally:
                lane.busy = False

    async def _collect(self, queue: asyncio.Queue[Item], hold_seconds: float) -> list[Item]:
        """Everything that arrives within ``hold_seconds``, or until the consumer's in-flight
        limit is reached: the burst becomes one digest."""
        collected: list[Item] = []
        full = self.deps.in_flight_full
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold_seconds
        while not full.is_set() and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, IN_FLIGHT_CHECK_SECONDS)):
                    collected.append(await queue.get())
        while not queue.empty():
            collected.append(queue.get_nowait())
        return collected

    # -- one send, of one event or of a digest --------------------------------------------
    async def _deliver(self, items: list[Item], lane: Lane) -> None:
        claimed = await self._claim(items)
        if not claimed:
            return
        to_send = [item for item, _, _ in claimed]
        lane.claims = [claim for _, claim, _ in claimed]
        lane.resend = any(unconfirmed for _, _, unconfirmed in claimed)
        try:
            await self._send(to_send, lane)
        finally:
            lane.claims = []
            lane.resend = False

    async def _send(self, to_send: list[Item], lane: Lane) -> None:
        kind = "digest" if len(to_send) > 1 else "single"
        try:
            if kind == "digest":
                body = self._render(to_send, await self._digest_link(to_send))
            else:
                body = self._render_one(to_send[0])
        except ValueError as exc:
            await self._give_up(list(zip(to_send, lane.claims, strict=True)), "render-error", str(exc))
            return
        try:
            await self._post_with_retries(body, kind, lane)
        except PermanentSendError as exc:
            refused = isinstance(exc, ChannelRefusedError)  # ChannelHealth logs those, once a minute
            claimed = list(zip(to_send, lane.claims, strict=True))
            await self._give_up(claimed, exc.reason, exc.detail, quiet=refused)
            return
        except ClaimLost:
            log.info("another sender took these deliveries over", extra={"channel": self.name})
            with contextlib.suppress(MarkersUnavailable):
                await self.deps.keys.release(lane.claims)  # the ones still ours, held
            for item in to_send:
                metrics.DELIVERIES.labels(self.name, "retry").inc()
                await item.message.settle(self.name, retry=True)
            return
        except asyncio.CancelledError:
            held = [claim for claim in lane.claims if claim.state == "held"]
            if len(held) < len(lane.claims):  # a request may have reached the bot: keep "sending"
                log.warning("cancelled during a send; its outcome is unknown", extra={"channel": self.name})
            with contextlib.suppress(MarkersUnavailable):  # nothing of these went out: a later copy sends
                await asyncio.shield(self.deps.keys.release(held))
            raise
        self._burst.record()
        await self._record_sent(lane.claims)
        if self.deps.after_sent is not None:
            await self.deps.after_sent([item.event.event_id for item in to_send])
        outcome = "digested" if kind == "digest" else "sent"
        for item in to_send:
            metrics.DELIVERIES.labels(self.name, outcome).inc()
            await item.message.settle(self.name, retry=False)

    def _facts(self, item: Item) -> JobFacts:
        config = self.channel.config
        return JobFacts(
            event=item.event,
            cluster_name=self.deps.cluster_name(item.event.job.cluster_id),
            link=job_link(self.deps.dashboard_url, item.event),
            silence_link=self.deps.silence_link(item.event),
            language=config.language,
            mention=mention_for(item.delivery.mention, config.type),
        )

    def _render_one(self, item: Item) -> Body:
        return self.channel.render(self._facts(item))

    async def _digest_link(self, items: list[Item]) -> str:
        """The dashboard view of exactly these jobs, or the dashboard itself while SQL is away (a
        digest is never held back for its link)."""
        store, dashboard = self.deps.digests, self.deps.dashboard_url
        if store is None:
            return dashboard
        title = f"{len(items)} job updates ({self.name})"
        try:
            digest_id = await store.record(self.name, title, [item.event for item in items])
        except Exception as exc:  # SQL away, or slow: the plain link this once
            log.warning(
                "digest not recorded; its link opens the dashboard",
                extra={"channel": self.name, "error": repr(exc)[:200]},
            )
            return dashboard
        return f"{dashboard.rstrip('/')}/digests/{digest_id}"

    def _render(self, items: list[Item], link: str) -> Body:
        config = self.channel.config
        digest = DigestFacts(
            items=[self._facts(item) for item in items],
            # The span it covers: a digest sent early (the in-flight limit reached) is shorter than
            # the hold.
            seconds=max(1, round(items[-1].queued_at - items[0].queued_at)),
            language=config.language,
            dashboard_url=link,
            max_listed=config.digest.max_listed,
        )
        return self.channel.render_digest(digest)

    async def _claim(self, items: list[Item]) -> list[tuple[Item, Claim, bool]]:
        """The items this sender now owns, each with its claim and whether a sender before it died
        with a request out (its outcome unknown: what follows is a resend)."""
        keys = [self.deps.keys.key(item.event.event_id, self.name) for item in items]
        # Without rate limits the request follows the claim at once: claim it as "sending" (one
        # round trip fewer); with them, "held" for the wait for a token. While NATS is away the
        # items wait here, in their lane's order: put back, they would return after a delay, and a
        # job's newer event could overtake them (Redis may have lost the job order meanwhile).
        state: Literal["held", "sending"] = "held" if self._bucket.limits else "sending"
        claims = await self._until_markers_answer(lambda: self.deps.keys.claim(keys, state=state), "claim")
        claimed: list[tuple[Item, Claim, bool]] = []
        for item, claim in zip(items, claims, strict=True):
            if claim.mine:
                claimed.append((item, claim, False))
            elif claim.state in ("sent", "dead"):
                metrics.DELIVERIES.labels(self.name, "duplicate").inc()
                await item.message.settle(self.name, retry=False)
            elif claim.age < self.deps.unconfirmed_after_seconds:
                metrics.DELIVERIES.labels(self.name, "retry").inc()  # a live sender may still be at it
                await item.message.settle(self.name, retry=True)
            elif (claim.state == "held" or self.deps.unconfirmed_policy == "resend") and (
                taken := await self.deps.keys.take_over(claim)
            ):
                # "held": its sender died before any request went out, so sending loses nothing
                # and repeats nothing. "sending": its outcome is unknown; the policy said resend
                # (never lost; the bot may show it twice, the second time marked as a resend).
                claimed.append((item, taken, claim.state == "sending"))
            elif claim.state == "held":
                metrics.DELIVERIES.labels(self.name, "retry").inc()  # taken over by another copy first
                await item.message.settle(self.name, retry=True)
            else:
                metrics.DELIVERIES.labels(self.name, "unconfirmed").inc()
                await self._give_up(
                    [(item, claim)], "unconfirmed-send", "a sender crashed mid-send; not resent"
                )
        return claimed

    async def _post_with_retries(self, body: Body, kind: str, lane: Lane) -> None:
        """Post until the bot confirms. Each attempt marks the lane's keys "sending" just before
        its request and, if the bot refused it, "held" again for the back-off, so a crash while
        waiting for a token or backing off leaves nothing that looks as if it might have gone out."""
        deps = self.deps
        deadline = deps.clock() + deps.retry_max_seconds
        attempt = 0
        unanswered = False  # an earlier attempt may have reached the bot: its outcome stays unknown
        while True:
            token = await self._bucket.acquire()
            if token.waited:
                metrics.RATE_LIMIT_WAIT_SECONDS.labels(self.name).inc(token.waited)
            if attempt > 0 or any(claim.state != "sending" for claim in lane.claims):
                lane.claims = await self._swap_claims(deps.keys.begin_request, lane.claims)
            started = time.perf_counter()
            try:
                await self._post(
                    body, token, Attempt(self._idempotency_key(lane.claims), lane.resend or unanswered)
                )
            except RetryableSendError as exc:
                metrics.SENDS.labels(self.name, kind, exc.reason).inc()
                if isinstance(exc, RateLimitedError):  # the bot counts sends we did not: learn them
                    await self._bucket.refused()
                unanswered = unanswered or exc.maybe_delivered
                if not unanswered:  # the bot answered "no" to every attempt: nothing went out
                    lane.claims = await self._swap_claims(deps.keys.end_request, lane.claims)
                attempt += 1
                backoff = min(deps.retry_cap_seconds, deps.retry_base_seconds * 2 ** (attempt - 1))
                delay = (
                    exc.retry_after if exc.retry_after is not None else backoff * (0.5 + deps.jitter() / 2)
                )
                if deps.clock() + delay > deadline:
                    raise PermanentSendError(
                        "retries-exhausted", f"{exc.reason} {exc.detail}".strip()
                    ) from None
                log.info(
                    "send failed, retrying",
                    extra={"channel": self.name, "reason": exc.reason, "delay": delay},
                )
                await deps.sleep(delay)
                continue
            except PermanentSendError as exc:
                metrics.SENDS.labels(self.name, kind, exc.reason).inc()
                if isinstance(exc, ChannelRefusedError):
                    deps.health.refused(self.name, exc.reason, exc.detail)
                raise
            metrics.SEND_SECONDS.labels(self.name).observe(time.perf_counter() - started)
            metrics.SENDS.labels(self.name, kind, "ok").inc()
            deps.health.accepted(self.name)
            return

    @staticmethod
    def _idempotency_key(claims: list[Claim]) -> str:
        """The delivery's key: its marker's for one event, a hash of them all for a digest."""
        if len(claims) == 1:
            return claims[0].key
        joined = "\n".join(sorted(claim.key for claim in claims))
        return "digest." + hashlib.sha256(joined.encode()).hexdigest()[:32]

    async def _post(self, body: Body, token: Token, attempt: Attempt) -> None:
        """One request; once it is answered (or failed), its token counts from now: the bot counted
        the request no earlier, however long ago the token was taken."""
        context = ATTEMPT.set(attempt)
        try:
            await self.channel.post(body)
        except Exception:
            await self._bucket.answered(token)
            raise
        finally:
            ATTEMPT.reset(context)
        await self._bucket.answered(token)

    async def _until_markers_answer(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        """Nothing may be claimed or posted without the markers: wait for them, with back-off."""
        delay = 0.1
        while True:
            try:
                return await operation()
            except MarkersUnavailable as exc:
                log.warning(
                    "delivery markers unavailable, waiting",
                    extra={"channel": self.name, "action": what, "error": repr(exc)},
                )
                await self.deps.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _swap_claims(
        self, swap: Callable[[list[Claim]], Awaitable[list[Claim] | None]], claims: list[Claim]
    ) -> list[Claim]:
        """Move our markers to their next state, waiting while NATS is away (nothing may be
        posted without it); ClaimLost if another sender has taken any of them over."""
        swapped = await self._until_markers_answer(lambda: swap(claims), "mark a send")
        if swapped is None:
            raise ClaimLost()
        return swapped

    async def _record_sent(self, claims: list[Claim]) -> None:
        """The send happened: record it before anything is acked, retrying while NATS is away.

        If the process dies before this succeeds the keys keep their "sending" markers and a
        redelivered copy is handled by the unconfirmed policy instead of being sent again.
        """
        delay = 0.1
        while True:
            try:
                await self.deps.keys.mark_sent([claim.key for claim in claims])
                return
            except MarkersUnavailable as exc:
                log.warning("cannot record a send yet", extra={"channel": self.name, "error": repr(exc)})
                await self.deps.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _give_up(
        self, claimed: list[tuple[Item, Claim]], reason: str, detail: str, *, quiet: bool = False
    ) -> None:
        """Dead-letter each event with the reason and mark it so no copy is ever sent. ``quiet``:
        the channel is refused outright, which ``ChannelHealth`` logs once a minute for all of them."""
        for item, claim in claimed:
            try:
                await self.deps.deadletters.publish(
                    payload=item.payload,
                    event_id=item.event.event_id,
                    channel=self.name,
                    reason=reason,
                    detail=detail,
                )
            except Exception as exc:  # NATS away: the redelivered copy will try again
                log.warning(
                    "cannot publish a dead letter yet", extra={"channel": self.name, "error": repr(exc)}
                )
                if claim.mine:  # nothing was sent (or the bot refused it): give our claim back
                    with contextlib.suppress(MarkersUnavailable):
                        await self.deps.keys.release([claim])
                await item.message.settle(self.name, retry=True)
                continue
            metrics.DEADLETTERS.labels(reason).inc()
            metrics.DELIVERIES.labels(self.name, "deadlettered").inc()
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "notification dead-lettered",
                extra={
                    "channel": self.name,
                    "event_id": item.event.event_id,
                    "reason": reason,
                    "detail": detail,
                },
            )
            with contextlib.suppress(MarkersUnavailable):
                await self.deps.keys.mark_dead([self.deps.keys.key(item.event.event_id, self.name)], reason)
            await item.message.settle(self.name, retry=False)
