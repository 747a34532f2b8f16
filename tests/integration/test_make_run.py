"""`make run` comes up with the whole system and stops cleanly, leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trainwatch_common.testing.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "Trainwatch is running: open "


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not collected it yet.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.slow
def test_make_run_comes_up_shows_live_jobs_and_stops_cleanly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    log_path = tmp_path / "make-run.log"
    env = {**os.environ, "TRAINWATCH_RUN_DIR": str(run_dir)}
    started = time.monotonic()
    with open(log_path, "wb") as log:
        launcher = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "run_local.py")],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:

        def ready() -> bool:
            return READY_LINE in log_path.read_text(errors="replace")

        wait_until(ready, timeout=120, message="the launcher's ready line")
        up_after = time.monotonic() - started
        text = log_path.read_text(errors="replace")
        found = re.search(re.escape(READY_LINE) + r"(http://[\d.]+:\d+)", text)
        assert found, text[-2000:]
        dashboard_url = found.group(1)
        assert httpx.get(f"{dashboard_url}/healthz", timeout=5).status_code == 200

        tokens = dict(line.split("=", 1) for line in (run_dir / "tokens.env").read_text().split())

        def jobs_visible() -> bool:
            page = httpx.get(f"{dashboard_url}/jobs?lang=en", timeout=5)
            return page.status_code == 200 and 'data-key="' in page.text  # a job row

        wait_until(jobs_visible, timeout=120, message="live jobs on the dashboard")
        print(f"make run: ready after {up_after:.1f}s, jobs visible after {time.monotonic() - started:.1f}s")
        assert tokens["TRAINWATCH_API_TOKEN"] not in text, "a token reached the logs"
    finally:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            raise
    assert launcher.returncode == 0, log_path.read_text(errors="replace")[-3000:]
    pids = [int(line.split()[0]) for line in (run_dir / "pids").read_text().splitlines()]
    assert len(pids) >= 10
    leftovers = [pid for pid in pids if alive(pid)]
    assert not leftovers, f"processes left behind: {leftovers}"


@pytest.mark.slow
def test_make_run_options_a_real_webhook_the_banner_and_a_quiet_stop(tmp_path: Path) -> None:
    """`make run CLUSTERS=2 RATE=3 DEMO_LANG=zh-CN RULES=...` with a real webhook configured: the
    simulated jobs' cards stay on the local sink, the banner comes again once jobs flow, the CLI's
    variables are all in tokens.env, and Ctrl-C stops without a wall of watch errors."""
    run_dir = tmp_path / "run"
    log_path = tmp_path / "make-run.log"
    rules = tmp_path / "rules.yaml"
    example = (ROOT / "services" / "notifier" / "rules.example.yaml").read_text()
    rules.write_text(example.replace("language: en ", "language: zh-CN "))
    env = {
        **os.environ,
        "TRAINWATCH_RUN_DIR": str(run_dir),
        # A team's real bot: nothing listens there, and no card of a simulated job may go there.
        "TRAINWATCH_FEISHU_WEBHOOK": "http://127.0.0.1:9/open-apis/bot/v2/hook/real-team-bot",
    }
    argv = ["make", "-s", "run", "CLUSTERS=2", "RATE=3", "DEMO_LANG=zh-CN", f"RULES={rules}"]
    with open(log_path, "wb") as log:
        launcher = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def banners() -> int:
            return log_path.read_text(errors="replace").count(READY_LINE)

        wait_until(lambda: banners() >= 1, timeout=180, message="the launcher's ready line")
        text = log_path.read_text(errors="replace")
        found = re.search(re.escape(READY_LINE) + r"(http://[\d.]+:\d+/\?lang=zh-CN)", text)
        assert found, text[-2000:]
        assert "TRAINWATCH_FEISHU_WEBHOOK is set: the simulated jobs' cards go to the local sink" in text
        tokens = dict(line.split("=", 1) for line in (run_dir / "tokens.env").read_text().split())
        assert tokens["TRAINWATCH_NATS_URL"].startswith("nats://127.0.0.1:")
        assert tokens["TRAINWATCH_QUERY_URL"].startswith("http://127.0.0.1:")
        headers = {"Authorization": f"Bearer {tokens['TRAINWATCH_API_TOKEN']}"}
        clusters = httpx.get(f"{tokens['TRAINWATCH_API_URL']}/v1/clusters", headers=headers, timeout=5).json()
        assert sorted(c["id"] for c in clusters["data"]) == ["sim-1", "sim-2"]

        # Once jobs flow (and the start-up noise with them), the banner comes again.
        wait_until(lambda: banners() >= 2, timeout=180, message="the banner, again once jobs flow")

        def a_card_reached_the_sink() -> bool:
            # the sink's lines: its name in colour, then "| " and the card's text
            text = log_path.read_text(errors="replace")
            return re.search(r"feishu-sink.*\|.*(失败|成功|重启|暂停)", text) is not None

        wait_until(a_card_reached_the_sink, timeout=180, message="a zh-CN card on the local sink")
    finally:
        os.killpg(launcher.pid, signal.SIGINT)  # Ctrl-C reaches make's whole process group
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            raise
    text = log_path.read_text(errors="replace")
    # make itself reports the interrupt (its exit status); the launcher's own last line says it stopped.
    assert text.rstrip().endswith("all stopped") or "all stopped\n" in text, text[-3000:]
    stopping = text.rindex("stopping...")
    assert "watch failed; retrying" not in text[stopping:], text[stopping:][:3000]
    assert "real-team-bot" not in text  # nor its URL in any log line
