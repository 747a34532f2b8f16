"""Signatures: Feishu against the documented test vector, DingTalk and the generic webhook."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import unquote_plus

from trainwatch_notifier.channels.dingtalk import dingtalk_sign
from trainwatch_notifier.channels.feishu import feishu_sign
from trainwatch_notifier.channels.webhook import webhook_signature


def test_feishu_signature_matches_the_documented_test_vector() -> None:
    # reference §5.4: secret "demo", timestamp 1599360473
    assert feishu_sign("demo", 1599360473) == "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8="


def test_feishu_signs_an_empty_message_with_timestamp_and_secret_as_the_key() -> None:
    key = b"1599360473\ndemo"
    expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert feishu_sign("demo", 1599360473) == expected
    # the mistake §8.2 warns about (secret as key, string as message) gives another value
    wrong = base64.b64encode(hmac.new(b"demo", key, hashlib.sha256).digest()).decode()
    assert feishu_sign("demo", 1599360473) != wrong


def test_dingtalk_signature_is_the_reverse_and_url_encoded() -> None:
    secret, timestamp = "SECdemo", 1599360473000
    sign = dingtalk_sign(secret, timestamp)
    raw = base64.b64encode(
        hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    )
    assert unquote_plus(sign) == raw.decode()
    assert "+" not in sign
    assert "/" not in sign
    assert "=" not in sign


def test_webhook_signature_covers_timestamp_and_body() -> None:
    header = webhook_signature("s3cr3t", 1700000000, b'{"a":1}')
    expected = hmac.new(b"s3cr3t", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
