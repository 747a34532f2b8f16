"""Tiny local stand-ins for DingTalk, WeCom, Slack and a generic webhook receiver.

Each checks what the real service checks (signature, key, required fields) and answers in its
format; ``script`` queues canned answers (rate limits, outages) ahead of the normal ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

DINGTALK_TOKEN = "dt-token"
DINGTALK_SECRET = "SECdingtalk"
WECOM_KEY = "wecom-key"
WEBHOOK_SECRET = "hook-secret"


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes

    def json(self) -> Any:
        return orjson.loads(self.raw)


@dataclass
class ChatSinks:
    accepted: dict[str, list[Request]] = field(default_factory=dict)
    script: deque[tuple[int, str, dict[str, str]]] = field(default_factory=deque)
    port: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/robot/send", self._dingtalk)
        app.router.add_post("/cgi-bin/webhook/send", self._wecom)
        app.router.add_post("/services/T0/B0/slack", self._slack)
        app.router.add_post("/hook", self._webhook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _capture(self, request: web.Request) -> Request:
        return Request(request.path, dict(request.query), dict(request.headers), await request.read())

    def _scripted(self) -> web.Response | None:
        if not self.script:
            return None
        status, body, headers = self.script.popleft()
        return web.Response(status=status, text=body, headers=headers, content_type="application/json")

    def _accept(self, name: str, request: Request) -> None:
        self.accepted.setdefault(name, []).append(request)

    async def _dingtalk(self, request: web.Request) -> web.Response:
        captured = await self._capture(request)
        if (scripted := self._scripted()) is not None:
            return scripted
        query = captured.query
        timestamp = int(query.get("timestamp", "0"))
        expected = base64.b64encode(
            hmac.new(
                DINGTALK_SECRET.encode(), f"{timestamp}\n{DINGTALK_SECRET}".encode(), hashlib.sha256
            ).digest()
        ).decode()
        # aiohttp has already URL-decoded the query: compare with the raw Base64
        if (
            query.get("access_token") != DINGTALK_TOKEN
            or abs(time.time() * 1000 - timestamp) > 3600_000
            or query.get("sign") != expected
        ):
            return web.json_response({"errcode": 310000, "errmsg": "sign not match"})
        body = captured.json()
        if body.get("msgtype") not in ("text", "markdown"):
            return web.json_response({"errcode": 40035, "errmsg": "invalid msgtype"})
        self._accept("dingtalk", captured)
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _wecom(self, request: web.Request) -> web.Response:
        captured = await self._capture(request)
        if (scripted := self._scripted()) is not None:
            return scripted
        if captured.query.get("key") != WECOM_KEY:
            return web.json_response({"errcode": 93000, "errmsg": "invalid webhook url"})
        body = captured.json()
        content = body.get(body.get("msgtype"), {}).get("content", "")
        if body.get("msgtype") == "markdown" and len(content.encode()) > 4096:
            return web.json_response({"errcode": 40058, "errmsg": "markdown.content exceed max length 4096"})
        self._accept("wecom", captured)
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _slack(self, request: web.Request) -> web.Response:
        captured = await self._capture(request)
        if (scripted := self._scripted()) is not None:
            return scripted
        body = captured.json()
        if not body.get("text") and not body.get("blocks"):
            return web.Response(status=400, text="no_text")
        self._accept("slack", captured)
        return web.Response(text="ok")

    async def _webhook(self, request: web.Request) -> web.Response:
        captured = await self._capture(request)
        if (scripted := self._scripted()) is not None:
            return scripted
        header = captured.headers.get("Trainwatch-Signature", "")
        parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
        mac = hmac.new(WEBHOOK_SECRET.encode(), f"{parts.get('t')}.".encode() + captured.raw, hashlib.sha256)
        if not hmac.compare_digest(parts.get("v1", ""), mac.hexdigest()):
            return web.Response(status=401, text="bad signature")
        self._accept("webhook", captured)
        return web.Response(status=204)
