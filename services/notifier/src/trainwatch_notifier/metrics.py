"""The notifier's Prometheus metrics (served on /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "trainwatch_notifier_events_total",
    "Job events consumed, by outcome (routed, unmatched, malformed)",
    ["outcome"],
)
ORDER_WAITS = Counter(
    "trainwatch_notifier_order_waits_total",
    "Events held back until an older event of the same job was settled (here or by another notifier)",
)
EVENTS_OUT_OF_ORDER = Counter(
    "trainwatch_notifier_events_out_of_order_total",
    "Events that arrived after a newer event of their job was settled (notified all the same)",
)
DELIVERIES = Counter(
    "trainwatch_notifier_deliveries_total",
    "Deliveries (event x channel) by outcome: sent, digested, duplicate, deadlettered, unconfirmed, retry",
    ["channel", "outcome"],
)
SENDS = Counter(
    "trainwatch_notifier_sends_total",
    "HTTP sends to bots by channel, kind (single, digest) and result (ok or the error reason)",
    ["channel", "kind", "result"],
)
SEND_SECONDS = Histogram(
    "trainwatch_notifier_send_seconds", "Duration of one HTTP send to a bot", ["channel"]
)
RATE_LIMIT_WAIT_SECONDS = Counter(
    "trainwatch_notifier_rate_limit_wait_seconds_total",
    "Time spent waiting for a bot's token bucket",
    ["channel"],
)
DEADLETTERS = Counter(
    "trainwatch_notifier_deadletters_total", "Dead letters published, by reason", ["reason"]
)
RULES_RELOADS = Counter(
    "trainwatch_notifier_rules_reloads_total", "Rules file loads by result (loaded, refused)", ["result"]
)
RULES_VALID = Gauge(
    "trainwatch_notifier_rules_file_valid", "1 if the rules file on disk is in force, 0 if refused"
)
RULES_COUNT = Gauge("trainwatch_notifier_rules", "Rules in force")
PENDING = Gauge("trainwatch_notifier_pending_events", "Events received and not yet acked")
