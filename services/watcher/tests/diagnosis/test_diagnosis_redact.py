"""Log tails: secret-looking strings replaced, bounded lines and bytes, never half a secret."""

from __future__ import annotations

import pytest

from trainwatch_common.events.diagnosis import MAX_LOG_BYTES, MAX_LOG_LINES
from trainwatch_watcher.diagnosis import log_tail, redact
from trainwatch_watcher.diagnosis.redact import MASK, redact_text

SECRETS = [
    ("Authorization: Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.payload.sig", "eyJhbGci"),
    ("curl -H 'authorization: Basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA"),
    ("token is bearer abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnopqrstuvwxyz012345"),
    ("connecting to postgres://trainer:s3cr3t-P4ss@db.internal:5432/runs", "s3cr3t-P4ss"),
    ("pip install from https://user:ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x", "ghp_abcdef"),
    ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("using key ASIAY34FZKBOKMUTVV7A for s3", "ASIAY34FZKBOKMUTVV7A"),
    ('{"password": "hunter2", "user": "bob"}', "hunter2"),
    ("WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", "0123456789abcdef"),
    ("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "hf_AbCdEf"),
    ("openai key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789", "sk-proj-AbCdEf"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-1234"),
    ("db_password: 'correct horse battery staple'", "correct horse"),
    ("--client-secret=abc123xyz", "abc123xyz"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNry",
    ),
    ("google AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "AIzaSyDaG"),
]


@pytest.mark.parametrize(("line", "secret"), SECRETS)
def test_secret_looking_strings_are_replaced(line: str, secret: str) -> None:
    text, changed = redact_text(line)
    assert changed
    assert secret not in text
    assert MASK in text


@pytest.mark.parametrize(
    "line",
    [
        "epoch 3 step 1200 loss=0.4213 lr=3e-4",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "tokenizer loaded: 50257 tokens",
        "saving checkpoint to s3://bucket/run-42/step-1200",
        "password: None",
        "NCCL WARN Call to connect returned Connection refused",
    ],
)
def test_ordinary_log_lines_are_left_alone(line: str) -> None:
    assert redact_text(line) == (line, False)


PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join("MIIEowIBAAKCAQEA" + "x" * 48 for _ in range(25))
    + "\n-----END RSA PRIVATE KEY-----"
)


def test_a_private_key_is_replaced_whole() -> None:
    text, changed = redact_text(f"loading key\n{PRIVATE_KEY}\ndone")
    assert changed
    assert "MIIEow" not in text
    assert text == f"loading key\n{MASK}\ndone"


def test_a_private_key_whose_begin_line_was_cut_off_is_still_replaced() -> None:
    tail = "\n".join(PRIVATE_KEY.splitlines()[10:])  # the log API's tailLines cut the BEGIN line off
    text, changed = redact_text(tail + "\nTraceback: ...")
    assert changed
    assert "MIIEow" not in text


def test_a_private_key_cut_before_its_end_is_replaced_to_the_end() -> None:
    head = "\n".join(PRIVATE_KEY.splitlines()[:5])
    text, _ = redact_text("x\n" + head)
    assert "MIIEow" not in text


def test_bounded_lines_and_bytes_keep_the_newest() -> None:
    text = "\n".join(f"line {i} " + "é" * 100 for i in range(200))
    result = redact(text)
    assert result.truncated
    assert len(result.lines) <= MAX_LOG_LINES
    assert sum(len(line.encode()) + 1 for line in result.lines) <= MAX_LOG_BYTES
    assert result.lines[-1].startswith("line 199 ")


def test_a_long_line_is_cut_and_progress_bars_and_colours_are_cleaned() -> None:
    text = "\x1b[32mINFO\x1b[0m start\n 10%|#   |\r 55%|#####  |\r100%|##########|\n" + "y" * 5000
    result = redact(text)
    assert result.lines[0] == "INFO start"
    assert result.lines[1] == "100%|##########|"
    assert len(result.lines[2]) <= 512
    assert result.truncated


def test_redaction_happens_before_the_cut() -> None:
    # The secret sits across the line-length limit: cutting first would keep half of it.
    line = "x" * 500 + " password=supersecretvalue123"
    result = redact(line)
    assert "supersecret" not in "".join(result.lines)
    assert result.redacted


def test_log_tail_for_the_contract() -> None:
    tail = log_tail("a\nb\nAuthorization: Bearer abcdefghijklmnop\n\n", container="pytorch", previous=True)
    assert tail.container == "pytorch"
    assert tail.previous
    assert tail.lines == ["a", "b", f"Authorization: Bearer {MASK}"]
    assert tail.redacted
    assert not tail.truncated
