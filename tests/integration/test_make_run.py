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
