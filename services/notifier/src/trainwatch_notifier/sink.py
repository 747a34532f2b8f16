"""A local stand-in for Feishu custom-bot webhooks, for tests, benchmarks and ``make run``.

It behaves as the reference (§5) documents: ``POST /open-apis/bot/v2/hook/<token>``; it checks
the body (shape, 20 KB), the signature and its one-hour timestamp window, the keywords and the
per-bot rate limits (5/s and 100/min), and answers with Feishu's codes, errors with HTTP 200.
Accepted messages are printed readably and kept in ``received``.

    python -m trainwatch_notifier.sink --port 9100 --secret demo
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from trainwatch_notifier.channels.base import IDEMPOTENCY_KEY_HEADER, RESEND_HEADER
from trainwatch_notifier.channels.feishu import feishu_sign

MAX_BODY_BYTES = 20 * 1024
TIMESTAMP_WINDOW_SECONDS = 3600
DEFAULT_RATE_LIMITS: tuple[tuple[int, float], ...] = ((5, 1.0), (100, 60.0))
MSG_TYPES = {"text", "post", "interactive", "image", "share_chat"}

SUCCESS = {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"}
ERRORS: dict[int, str] = {
    9499: "Bad Request",
    11232: "frequency limited psm[lark.oapi.app_platform_runtime]appID[-1]",
    19001: "param invalid: incoming webhook access token invalid",
    19021: "sign match fail or timestamp is not within one hour from current time",
    19024: "Key Words Not Found",
}


@dataclass(frozen=True, slots=True)
class Received:
    token: str
    body: dict[str, Any]
    received_at: float  # wall clock, comparable with a publisher's time.time() on this machine
    # The notifier's headers (Feishu ignores them): the delivery's idempotency key, and whether it
    # is a resend after a send whose outcome the notifier could not know.
    idempotency_key: str | None = None
    resend: bool = False


class BadBody(ValueError):
    pass


def check_body(body: Any) -> None:
    """Raise BadBody unless ``body`` is a message Feishu would accept (§5.2)."""
    if not isinstance(body, dict):
        raise BadBody("body is not a JSON object")
    msg_type = body.get("msg_type")
    if msg_type not in MSG_TYPES:
        raise BadBody(f"unknown msg_type {msg_type!r}")
    if msg_type == "interactive":
        card = body.get("card")
        if not isinstance(card, dict) or not (
            "body" in card or "elements" in card or card.get("type") == "template"
        ):
            raise BadBody("interactive needs a card object")
        return
    content = body.get("content")
    if not isinstance(content, dict):
        raise BadBody("content must be an object")
    if msg_type == "text" and not (isinstance(content.get("text"), str) and content["text"]):
        raise BadBody("text needs content.text")
    if msg_type == "post":
        post = content.get("post")
        if not isinstance(post, dict) or not ({"zh_cn", "en_us"} & post.keys()):
            raise BadBody("post needs content.post.zh_cn or en_us")
        for language in post.values():
            for paragraph in language.get("content", []):
                for node in paragraph:
                    if node.get("tag") == "a" and not str(node.get("href", "")).startswith(
                        ("http://", "https://")
                    ):
                        raise BadBody("a link needs a valid href")


def text_values(value: Any) -> list[str]:
    """The strings a keyword check looks at: text and titles, not links."""
    if isinstance(value, dict):
        found: list[str] = []
        for key, item in value.items():
            if key in ("text", "title", "content") and isinstance(item, str):
                found.append(item)
            elif key not in ("href", "default_url", "url", "sign", "timestamp"):
                found += text_values(item)
        return found
    if isinstance(value, list):
        return [text for item in value for text in text_values(item)]
    return []


def summarize(token: str, body: dict[str, Any]) -> str:
    """A readable rendering of a received message for the terminal."""
    stamp = time.strftime("%H:%M:%S")
    msg_type = body.get("msg_type")
    lines: list[str] = []
    if msg_type == "interactive":
        card = body.get("card", {})
        header = card.get("header", {})
        lines.append(f"[{header.get('template', '')}] {header.get('title', {}).get('content', '')}")
        for element in card.get("body", {}).get("elements", card.get("elements", [])):
            if element.get("tag") == "markdown":
                lines += element.get("content", "").splitlines()
            elif element.get("tag") == "button":
                urls = [b.get("default_url") for b in element.get("behaviors", [])]
                lines.append(
                    f"[{element.get('text', {}).get('content', 'button')}] → {', '.join(map(str, urls))}"
                )
    elif msg_type == "post":
        for language in body.get("content", {}).get("post", {}).values():
            lines.append(language.get("title", ""))
            for paragraph in language.get("content", []):
                lines.append("".join(_node_text(node) for node in paragraph))
    else:
        lines += str(body.get("content", {}).get("text", body.get("content"))).splitlines()
    rule = f"── feishu sink {stamp} bot={token} {msg_type} "
    return "\n".join([rule + "─" * max(0, 72 - len(rule)), *("  " + line for line in lines)])


def _node_text(node: dict[str, Any]) -> str:
    if node.get("tag") == "a":
        return f"{node.get('text')} <{node.get('href')}>"
    if node.get("tag") == "at":
        return f"@{node.get('user_name') or node.get('user_id')}"
    return str(node.get("text", ""))


class FeishuSink:
    def __init__(
        self,
        *,
        secret: str | None = None,
        rate_limits: Sequence[tuple[int, float]] = DEFAULT_RATE_LIMITS,
        keywords: Sequence[str] = (),
        tokens: Sequence[str] = (),
        echo: Callable[[str], None] | None = None,
        record_path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.secret = secret
        self.rate_limits = tuple(rate_limits)
        self.keywords = tuple(keywords)
        self.tokens = frozenset(tokens)  # empty: any token is a bot
        self._echo = echo
        self._record = record_path.open("ab") if record_path else None
        self._clock = clock
        self.received: list[Received] = []
        self.answers: Counter[int] = Counter()
        self.release = asyncio.Event()  # clear it to hold answers (the message is already received)
        self.release.set()
        self._accepted: dict[str, deque[float]] = {}
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def url(self, token: str = "bot") -> str:
        return f"http://127.0.0.1:{self.port}/open-apis/bot/v2/hook/{token}"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post("/open-apis/bot/v2/hook/{token}", self._hook)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self.port

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._record is not None:
            self._record.close()

    def _answer(self, code: int) -> web.Response:
        self.answers[code] += 1
        body = SUCCESS if code == 0 else {"code": code, "msg": ERRORS[code], "data": {}}
        return web.json_response(body)  # Feishu answers errors with HTTP 200 too

    def _signature_ok(self, body: dict[str, Any]) -> bool:
        if self.secret is None:
            return True
        timestamp, sign = body.get("timestamp"), body.get("sign")
        try:
            seconds = int(str(timestamp))
        except ValueError:
            return False
        if abs(self._clock() - seconds) > TIMESTAMP_WINDOW_SECONDS:
            return False
        return isinstance(sign, str) and hmac.compare_digest(sign, feishu_sign(self.secret, seconds))

    def _rate_limited(self, token: str) -> bool:
        now = time.monotonic()
        accepted = self._accepted.setdefault(token, deque())
        longest = max((per for _, per in self.rate_limits), default=0.0)
        while accepted and accepted[0] <= now - longest:
            accepted.popleft()
        for count, per in self.rate_limits:
            if sum(1 for t in accepted if t > now - per) >= count:
                return True
        accepted.append(now)
        return False

    async def _hook(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        raw = await request.read()
        if len(raw) > MAX_BODY_BYTES:
            return self._answer(9499)
        try:
            body = orjson.loads(raw)
            check_body(body)
        except (orjson.JSONDecodeError, BadBody):
            return self._answer(9499)
        if self.tokens and token not in self.tokens:
            return self._answer(19001)
        if not self._signature_ok(body):
            return self._answer(19021)
        if self.keywords and not any(k in text for text in text_values(body) for k in self.keywords):
            return self._answer(19024)
        if self._rate_limited(token):
            return self._answer(11232)
        received = Received(
            token,
            body,
            time.time(),
            idempotency_key=request.headers.get(IDEMPOTENCY_KEY_HEADER),
            resend=request.headers.get(RESEND_HEADER) == "unconfirmed",
        )
        self.received.append(received)
        if self._record is not None:
            record = {"token": token, "received_at": received.received_at, "body": body}
            if received.idempotency_key is not None:
                record |= {"idempotency_key": received.idempotency_key, "resend": received.resend}
            self._record.write(orjson.dumps(record))
            self._record.write(b"\n")
            self._record.flush()
        if self._echo is not None:
            self._echo(summarize(token, body))
        await self.release.wait()
        return self._answer(0)


def _print(text: str) -> None:
    print(text, flush=True)


async def _serve(args: argparse.Namespace) -> None:
    sink = FeishuSink(
        secret=args.secret or os.environ.get("TRAINWATCH_SINK_SECRET") or None,
        rate_limits=() if args.no_rate_limit else DEFAULT_RATE_LIMITS,
        keywords=args.keyword,
        echo=None if args.quiet else _print,
        record_path=args.record,
    )
    port = await sink.start(args.host, args.port)
    print(f"feishu sink listening on http://{args.host}:{port}/open-apis/bot/v2/hook/<token>", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await sink.stop()
        print(f"feishu sink answers: {dict(sink.answers)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainwatch_notifier.sink", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--secret", help="signing secret to require (or TRAINWATCH_SINK_SECRET)")
    parser.add_argument("--no-rate-limit", action="store_true", help="accept any rate (benchmarks)")
    parser.add_argument("--keyword", action="append", default=[], help="security keyword (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="do not print messages")
    parser.add_argument("--record", type=Path, help="append received messages to this JSON-lines file")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
