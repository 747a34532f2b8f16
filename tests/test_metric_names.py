"""One prefix convention for metrics (issue 17): ``trainwatch_<service>_...``, the service being
the one that defines the metric. The watcher's used to be ``trainwatch_<thing>`` (renamed, no old
names kept: services/watcher/README.md, "Metrics")."""

from __future__ import annotations

from metric_names import defined_metrics


def test_every_metric_carries_its_service_in_its_prefix() -> None:
    metrics = defined_metrics()
    assert len(metrics) > 30, "the source scan found the metrics"
    wrong = sorted(
        f"{name} (defined by {service})"
        for name, (service, _) in metrics.items()
        if service != "common" and not name.startswith(f"trainwatch_{service}_")
    )
    assert wrong == []


def test_the_jobs_by_phase_gauge_exists() -> None:
    assert defined_metrics()["trainwatch_persister_jobs"] == ("persister", "Gauge")
