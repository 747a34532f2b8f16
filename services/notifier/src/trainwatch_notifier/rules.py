"""Routing, pure: an event, its cluster's labels and the ruleset give the deliveries to make.

Every matching rule contributes its channels; an event reaches each channel at most once, and
mentions its owner there if any matching rule for that channel asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from trainwatch_common.events.jobs import JobStatusEvent, Phase
from trainwatch_notifier.ruleset import Match, OwnerIds, Ruleset

_OUTCOMES = (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True, slots=True)
class Owner:
    """The job's owner: the name found on the job, and the ids it maps to (if configured)."""

    key: str
    ids: OwnerIds | None

    @property
    def display_name(self) -> str:
        return (self.ids.name if self.ids and self.ids.name else None) or self.key


@dataclass(frozen=True, slots=True)
class Delivery:
    channel: str
    rules: tuple[str, ...]
    mention: Owner | None


def matches(match: Match, event: JobStatusEvent, cluster_labels: dict[str, str], ruleset: Ruleset) -> bool:
    job = event.job
    if event.change not in match.changes:
        return False
    phases = match.phases if match.phases is not None else ruleset.defaults.phases
    if event.phase not in phases:
        return False
    if match.terminal is None:
        # An outcome first reported while pods are still being cleaned up ("finishing") is
        # followed by the terminal one: notify that one only, or people hear it twice.
        if event.phase in _OUTCOMES and not event.terminal:
            return False
    elif event.terminal != match.terminal:
        return False
    if match.clusters and not any(fnmatchcase(job.cluster_id, pattern) for pattern in match.clusters):
        return False
    if any(cluster_labels.get(key) != value for key, value in match.cluster_labels.items()):
        return False
    if match.namespaces and not any(fnmatchcase(job.namespace, pattern) for pattern in match.namespaces):
        return False
    if match.kinds:
        wanted = {kind.lower() for kind in match.kinds}
        if job.kind_key.lower() not in wanted and job.kind.lower() not in wanted:
            return False
    return all(event.labels.get(key) == value for key, value in match.labels.items())


def owner_of(event: JobStatusEvent, ruleset: Ruleset) -> Owner | None:
    name = event.labels.get(ruleset.owner_label) if ruleset.owner_label else None
    name = name or event.owner
    if not name:
        return None
    return Owner(key=name, ids=ruleset.owners.get(name))


def route(event: JobStatusEvent, *, cluster_labels: dict[str, str], ruleset: Ruleset) -> list[Delivery]:
    """The channels this event goes to, in the order their first rule names them."""
    by_channel: dict[str, tuple[list[str], bool]] = {}
    for rule in ruleset.rules:
        if not matches(rule.match, event, cluster_labels, ruleset):
            continue
        for channel in rule.channels:
            rules, mention = by_channel.setdefault(channel, ([], False))
            rules.append(rule.name)
            by_channel[channel] = (rules, mention or rule.mention_owner)
    if not by_channel:
        return []
    owner = owner_of(event, ruleset)
    return [
        Delivery(channel=channel, rules=tuple(rules), mention=owner if mention else None)
        for channel, (rules, mention) in by_channel.items()
    ]
