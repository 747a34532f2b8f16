"""The job page says why (issue 16), in a real browser: event -> NATS -> persister (SQL) -> dashboard.

The registry, the persister and the dashboard run as processes (as `make run` starts them) on the
test plugin's nats-server; job events with a diagnosis are published on the JOBS stream as a
watcher publishes them. Chromium (Playwright, the system browser) opens the job page in English
and Chinese: the reason line, who acts, the evidence, the Warning events, the log tail folded in a
<details> element, resources, queue wait and run time, and a hostile cluster's text shown as text;
then a diagnosis update published while the page is open replaces the "why" without a reload.

Screenshots: .artifacts/e2e/diagnosis-en.png and diagnosis-zh-CN.png (and, with
TRAINWATCH_README_SCREENSHOT=1, docs/img/job-diagnosis-en.png and job-diagnosis-zh-CN.png).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from test_dashboard_e2e import (
    ADMIN,
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_FLAGS,
    VIEWER,
    WATCHER,
    Stack,
    _missing_prerequisites,
    free_port,
    wait_healthy,
)

from trainwatch_common import (
    JobRef,
    JobStatusEvent,
    Phase,
    ReplicaCounts,
    ensure_streams,
    job_event_id,
    job_subject,
    wrap_job_event,
)
from trainwatch_common.events.diagnosis import (
    Blame,
    Diagnosis,
    DiagnosisCategory,
    DiagnosisWarning,
    JobResources,
    LogTail,
)
from trainwatch_common.testing import eventually

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLUSTER, UID, NAME = "gpu-east", "uid-llama-7b", "llama-7b-sft"
# What a hostile job or pod could put in its names, messages and logs.
HOSTILE = '<img id="pwn" src=x onerror="document.title=1"><script>document.title=2</script>'

OOM = Diagnosis(
    category=DiagnosisCategory.OOM_KILLED, blame=Blame.USER_CONFIG,
    summary="worker-3 (pytorch) was killed for running out of memory (OOMKilled, exit 137), "
            "restarted 2 times",
    reason="OOMKilled", message=f"container pytorch used 81Gi of its 80Gi limit {HOSTILE}",
    role="worker", replica_index=3, pod="llama-7b-sft-worker-3", container="pytorch",
    exit_code=137, signal=9, restarts=2, node="gpu-node-7", pods_affected=1,
    since=T0 + timedelta(minutes=41),
    events=[
        DiagnosisWarning(reason="BackOff", message="Back-off restarting failed container pytorch", count=4,
                         last_seen=T0 + timedelta(minutes=44), object="Pod/llama-7b-sft-worker-3"),
        DiagnosisWarning(reason="OOMKilling",
                         message=f"Memory cgroup out of memory: Killed process 4242 {HOSTILE}",
                         last_seen=T0 + timedelta(minutes=41), object="Node/gpu-node-7"),
    ],
    log_tail=LogTail(container="pytorch", previous=True, redacted=True, lines=[
        "[rank3] epoch 2 step 1800 loss 1.204 lr 2.0e-05",
        "[rank3] epoch 2 step 1850 loss 1.198 lr 2.0e-05",
        f"[rank3] HF_TOKEN=[REDACTED] {HOSTILE}",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]),
)  # fmt: skip
RESOURCES = JobResources(
    pods=4, gpus=32, gpu_resource="nvidia.com/gpu", gpu_product="NVIDIA-H100-80GB-HBM3",
    cpu=96.0, memory_bytes=1536 * 2**30,
)  # fmt: skip


def event(sequence: int, phase: Phase, change: str, **fields: Any) -> JobStatusEvent:
    return JobStatusEvent(
        event_id=job_event_id(CLUSTER, UID, sequence), change=change, sequence=sequence, epoch=1,  # type: ignore[arg-type]
        watcher_id="watcher-e2e",
        job=JobRef(cluster_id=CLUSTER, api_version="kubeflow.org/v1", kind="PyTorchJob",
                   kind_key="pytorchjob", namespace="team-llm", name=NAME, uid=UID,
                   resource_version=str(1000 + sequence)),
        phase=phase, terminal=phase is Phase.FAILED,
        replicas={"Master": ReplicaCounts(desired=1, active=1),
                  "Worker": ReplicaCounts(desired=3, active=2, failed=1)},
        created_at=T0, observed_at=T0 + timedelta(minutes=5 * sequence), resources=RESOURCES, owner="alice",
        **fields,
    )  # fmt: skip


EVENTS = [
    event(0, Phase.PENDING, "created", queue_wait_seconds=0.0),
    event(1, Phase.PENDING, "diagnosis", previous_phase=Phase.PENDING, queue_wait_seconds=300.0,
          diagnosis=Diagnosis(category=DiagnosisCategory.QUEUE_WAITING, blame=Blame.INFRASTRUCTURE,
                              summary="waiting for quota in queue team-llm, position 3", queue="team-llm",
                              position=2)),
    event(2, Phase.RUNNING, "transition", previous_phase=Phase.PENDING, started_at=T0 + timedelta(minutes=10),
          queue_wait_seconds=600.0, run_seconds=0.0),
    event(3, Phase.FAILED, "transition", previous_phase=Phase.RUNNING, reason="PyTorchJobFailed",
          message="PyTorchJob llama-7b-sft has failed because it has reached the specified backoff limit",
          started_at=T0 + timedelta(minutes=10), finished_at=T0 + timedelta(minutes=45),
          queue_wait_seconds=600.0, run_seconds=2100.0, diagnosis=OOM),
]  # fmt: skip


@dataclass(frozen=True)
class System:
    dashboard: str
    query: str


@pytest.fixture
async def system(nats_url: str, tmp_path: Path) -> AsyncIterator[System]:
    missing = _missing_prerequisites()
    if missing:
        pytest.skip(f"the end-to-end test needs: {', '.join(missing)}")
    from cryptography.fernet import Fernet

    shutil.rmtree(ARTIFACTS / "logs", ignore_errors=True)
    ports = {name: free_port() for name in ("registry", "persister", "dashboard")}
    registry, query = f"http://127.0.0.1:{ports['registry']}", f"http://127.0.0.1:{ports['persister']}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")},
        "PYTHONUNBUFFERED": "1",
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_LOG_FORMAT": "text",
        "TRAINWATCH_ADMIN_TOKENS": ADMIN,
        "TRAINWATCH_VIEWER_TOKENS": VIEWER,
        "TRAINWATCH_WATCHER_TOKENS": WATCHER,
        "TRAINWATCH_REGISTRY_URL": registry,
        "TRAINWATCH_QUERY_URL": query,
    }
    stack = Stack(workdir=tmp_path, env=env)
    try:
        stack.start(
            "registry", "trainwatch_registry",
            TRAINWATCH_HTTP_PORT=str(ports["registry"]),
            TRAINWATCH_REGISTRY_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}",
            TRAINWATCH_REGISTRY_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
        )  # fmt: skip
        stack.start(
            "persister", "trainwatch_persister",
            TRAINWATCH_HTTP_PORT=str(ports["persister"]),
            TRAINWATCH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
            TRAINWATCH_BATCH_MAX_WAIT_MS="50",
        )  # fmt: skip
        dashboard = f"http://127.0.0.1:{ports['dashboard']}"
        stack.start(
            "dashboard", "trainwatch_dashboard",
            TRAINWATCH_HTTP_PORT=str(ports["dashboard"]),
            TRAINWATCH_DASHBOARD_API_TOKEN=VIEWER,
        )  # fmt: skip
        for url in (f"{registry}/healthz", f"{query}/healthz", f"{dashboard}/readyz"):
            await wait_healthy(stack, url)
        yield System(dashboard, query)
    finally:
        stack.stop()


async def publish(nats_url: str, events: list[JobStatusEvent]) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        for e in events:
            subject = job_subject(
                cluster_id=e.job.cluster_id,
                namespace=e.job.namespace,
                kind_key=e.job.kind_key,
                name=e.job.name,
            )
            await js.publish(subject, wrap_job_event(e).to_json(), headers={"Nats-Msg-Id": e.event_id})
    finally:
        await client.close()


async def publish_and_persist(system: System, nats_url: str) -> None:
    await publish(nats_url, EVENTS)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {VIEWER}"}) as api:

        async def persisted() -> bool:
            answer = await api.get(f"{system.query}/v1/jobs/{CLUSTER}/{UID}")
            return answer.status_code == 200 and answer.json()["sequence"] == 3

        await eventually(persisted, timeout=30, message="the persister stored the job's four events")
        listed = (await api.get(f"{system.query}/v1/jobs", params={"diagnosis": "OOMKilled"})).json()
        assert [j["name"] for j in listed["data"]] == [NAME]


async def shot(page: Any, language: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"diagnosis-{language}.png"), full_page=True)
    if os.environ.get("TRAINWATCH_README_SCREENSHOT") == "1":
        await page.screenshot(
            path=str(ROOT / "docs" / "img" / f"job-diagnosis-{language}.png"), full_page=True
        )


LANGUAGES = {
    "en": {
        "line": "OOMKilled · Worker-3 (pytorch) exit 137 on node gpu-node-7",
        "blame": "The job's author (configuration)",
        "events": "Warning events",
        "log": "Log tail of pytorch, previous run (4 lines) · secrets redacted",
        "timeline": ["QueueWaiting waiting for quota in queue team-llm, position 3", "diagnosis update"],
    },
    "zh-CN": {
        "line": "内存不足 (OOMKilled) · Worker-3 (pytorch) 退出码 137 节点 gpu-node-7",
        "blame": "任务作者（配置）",  # noqa: RUF001
        "events": "告警事件",
        "log": "pytorch 上次运行的日志末尾（4 行） · 已隐去疑似密钥",  # noqa: RUF001
        "timeline": ["排队中 (QueueWaiting) waiting for quota in queue team-llm, position 3", "诊断更新"],
    },
}


async def test_the_job_page_shows_the_diagnosis_in_both_languages(system: System, nats_url: str) -> None:
    from playwright.async_api import async_playwright, expect

    await publish_and_persist(system, nats_url)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        context = await browser.new_context(viewport={"width": 1300, "height": 900}, locale="en-US")
        page = await context.new_page()
        page.set_default_timeout(20_000)
        try:
            await page.goto(f"{system.dashboard}/admin/signin")
            await page.fill("#admin-token", VIEWER)
            await page.click("#signin-form button[type=submit]")
            await page.wait_for_load_state()
            for language, expected in LANGUAGES.items():
                await page.goto(f"{system.dashboard}/jobs/{CLUSTER}/{UID}?lang={language}")
                await expect(page.locator("html")).to_have_attribute("lang", language)
                diagnosis = page.locator("#diagnosis")
                await expect(page.locator("#diagnosis-line")).to_have_text(expected["line"])
                await expect(page.locator("#diagnosis-summary")).to_have_text(OOM.summary)
                evidence = page.locator("#diagnosis-evidence")
                for value in (expected["blame"], "llama-7b-sft-worker-3", "pytorch", "137", "gpu-node-7"):
                    await expect(evidence).to_contain_text(value)
                await expect(diagnosis.locator("h3")).to_have_text(expected["events"])
                rows = page.locator("#diagnosis-events tbody tr")
                await expect(rows).to_have_count(2)
                await expect(rows.first).to_contain_text("Back-off restarting failed container pytorch")
                # The log tail is folded: its lines are hidden until the summary is clicked.
                log = page.locator("#diagnosis-log")
                await expect(log.locator("summary")).to_have_text(expected["log"])
                await expect(log.locator("pre")).to_be_hidden()
                await log.locator("summary").click()
                await expect(log.locator("pre")).to_be_visible()
                await expect(log.locator("pre")).to_contain_text("torch.OutOfMemoryError: CUDA out of memory")
                # Resources, queue wait and run time.
                await expect(page.locator("#job-resources")).to_contain_text("32 × NVIDIA-H100-80GB-HBM3")  # noqa: RUF001
                await expect(page.locator("#job-resources")).to_contain_text("1.5 TiB")
                await expect(page.locator("#job-queue-wait")).to_have_text("10m 0s")
                await expect(page.locator("#job-run-time")).to_have_text("35m 0s")
                # The history: the queue wait before, as a diagnosis update.
                queued = page.locator('#timeline li[data-sequence="1"]')
                for text in expected["timeline"]:
                    await expect(queued).to_contain_text(text)
                # A hostile cluster's text is text: shown as written, nothing injected or run.
                await expect(page.locator("#pwn")).to_have_count(0)
                await expect(evidence).to_contain_text('<img id="pwn"')
                await expect(log.locator("pre")).to_contain_text("<script>document.title=2</script>")
                assert await page.title() not in ("1", "2")
                await shot(page, language)

            # -- live: a diagnosis update reaches the open page without a reload ----------------------
            await page.goto(f"{system.dashboard}/jobs/{CLUSTER}/{UID}?lang=en")
            await expect(page.locator("#live-status")).to_have_class(re.compile(r"\bon\b"))
            node_lost = OOM.model_copy(
                update={"category": DiagnosisCategory.NODE_FAILURE, "blame": Blame.INFRASTRUCTURE,
                        "summary": "worker-3 (pytorch) was lost with its node gpu-node-7 (NodeLost)",
                        "exit_code": None, "signal": None, "reason": "NodeLost", "message": None,
                        "events": [], "log_tail": None}
            )  # fmt: skip
            update = EVENTS[-1].model_copy(
                update={"event_id": job_event_id(CLUSTER, UID, 4), "sequence": 4, "change": "diagnosis",
                        "previous_phase": Phase.FAILED, "diagnosis": node_lost,
                        "observed_at": T0 + timedelta(minutes=50)}
            )  # fmt: skip
            await publish(nats_url, [update])
            await expect(page.locator("#diagnosis-line")).to_have_text(
                "NodeFailure · Worker-3 (pytorch) on node gpu-node-7"
            )
            await expect(page.locator("#diagnosis-evidence .blame")).to_have_text(
                "The platform (infrastructure)"
            )
            await expect(page.locator("#diagnosis-log")).to_have_count(0)
            await expect(page.locator('#timeline li[data-sequence="4"]')).to_contain_text("diagnosis update")
        finally:
            await context.close()
            await browser.close()


def other_job(uid: str, name: str, diagnosis: Diagnosis | None, sequence: int = 0) -> JobStatusEvent:
    """Another job of the cluster, seen for the first time (or at ``sequence``), running."""
    base = event(0, Phase.RUNNING, "created", diagnosis=diagnosis)
    return base.model_copy(
        update={
            "event_id": job_event_id(CLUSTER, uid, sequence),
            "sequence": sequence,
            "change": "created" if sequence == 0 else "diagnosis",
            "previous_phase": None if sequence == 0 else Phase.RUNNING,
            "job": base.job.model_copy(update={"uid": uid, "name": name}),
            "observed_at": T0 + timedelta(hours=1, minutes=sequence),
        }
    )


async def test_a_jobs_list_filtered_by_category_inserts_and_marks_jobs_live(
    system: System, nats_url: str
) -> None:
    """With a diagnosis filter set, the live list inserted no new job (events did not say the
    category). Now each event carries the job's current one: a new job of the category is
    inserted, one of another category is not, and a shown job whose diagnosis moves to another
    category stays, marked as no longer matching."""
    from playwright.async_api import async_playwright, expect

    await publish_and_persist(system, nats_url)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        context = await browser.new_context(viewport={"width": 1300, "height": 900}, locale="en-US")
        page = await context.new_page()
        page.set_default_timeout(20_000)
        try:
            await page.goto(f"{system.dashboard}/admin/signin")
            await page.fill("#admin-token", VIEWER)
            await page.click("#signin-form button[type=submit]")
            await page.wait_for_load_state()
            await page.goto(f"{system.dashboard}/jobs?diagnosis=OOMKilled&lang=en")
            await expect(page.locator("#live-status")).to_have_class(re.compile(r"\bon\b"))
            rows = page.locator("#jobs-table tbody tr")
            await expect(rows).to_have_count(1)
            shown = page.locator(f'#jobs-table tr[data-key="{CLUSTER}/{UID}"]')
            await expect(shown).not_to_have_class(re.compile(r"\boff-filter\b"))

            pulling = OOM.model_copy(
                update={"category": DiagnosisCategory.IMAGE_PULL_FAILED, "summary": "pull"}
            )
            # In stream order: the other category's job first, then the filtered one's.
            await publish(
                nats_url,
                [other_job("uid-pull", "vit-pull", pulling), other_job("uid-oom", "bert-oom", OOM)],
            )
            await expect(page.locator('#jobs-table tr[data-key="gpu-east/uid-oom"]')).to_have_count(1)
            await expect(page.locator('#jobs-table tr[data-key="gpu-east/uid-pull"]')).to_have_count(0)
            await expect(rows).to_have_count(2)

            # The shown job's diagnosis moves on (a diagnosis update): kept, marked, explained.
            node_lost = OOM.model_copy(update={"category": DiagnosisCategory.NODE_FAILURE, "summary": "lost"})
            moved = EVENTS[-1].model_copy(
                update={"event_id": job_event_id(CLUSTER, UID, 4), "sequence": 4, "change": "diagnosis",
                        "previous_phase": Phase.FAILED, "diagnosis": node_lost,
                        "observed_at": T0 + timedelta(minutes=50)}
            )  # fmt: skip
            await publish(nats_url, [moved])
            await expect(shown).to_have_class(re.compile(r"\boff-filter\b"))
            await expect(shown).to_have_attribute(
                "title", "No longer OOMKilled: its diagnosis changed after this list was loaded."
            )
            # ... and back: it matches again.
            back = moved.model_copy(
                update={"event_id": job_event_id(CLUSTER, UID, 5), "sequence": 5, "diagnosis": OOM}
            )
            await publish(nats_url, [back])
            await expect(shown).not_to_have_class(re.compile(r"\boff-filter\b"))
            await expect(rows).to_have_count(2)
        finally:
            await context.close()
            await browser.close()
