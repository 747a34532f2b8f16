"""The pure planner: quotas, rendezvous preferences, balance and minimal moves."""

from __future__ import annotations

from collections import Counter

import pytest

from trainwatch_watcher import sharding

CLUSTERS = [f"c{i:04d}" for i in range(1000)]


def replicas(n: int) -> list[str]:
    return [f"watcher-{i}" for i in range(n)]


def holdings_of(assignment: dict[str, str], members: list[str]) -> dict[str, set[str]]:
    holdings: dict[str, set[str]] = {r: set() for r in members}
    for cluster_id, owner in assignment.items():
        if owner in holdings:
            holdings[owner].add(cluster_id)
    return holdings


def minimum_moves(before: dict[str, str], members: list[str], n: int) -> int:
    """The fewest owner changes that reach a balanced assignment (shares floor/ceil) from ``before``."""
    counts = sorted((sum(1 for o in before.values() if o == r) for r in members), reverse=True)
    base, extra = divmod(n, len(members))
    targets = [base + 1] * extra + [base] * (len(members) - extra)
    return n - sum(min(have, target) for have, target in zip(counts, targets, strict=True))


@pytest.mark.parametrize(("n", "r", "share"), [(60, 3, 20), (61, 3, 21), (0, 3, 0), (5, 10, 1), (7, 0, 7)])
def test_fair_share_is_the_ceiling(n: int, r: int, share: int) -> None:
    assert sharding.fair_share(n, r) == share


@pytest.mark.parametrize(("n", "r"), [(60, 3), (1000, 3), (1000, 7), (3, 5), (0, 2), (1, 1)])
def test_quotas_sum_to_the_cluster_count_and_differ_by_at_most_one(n: int, r: int) -> None:
    members = replicas(r)
    quotas = [sharding.quota(m, members, n) for m in members]
    assert sum(quotas) == n
    assert max(quotas) - min(quotas) <= 1
    assert max(quotas) <= sharding.fair_share(n, r)


def test_a_replica_counts_itself_even_before_its_heartbeat_is_seen() -> None:
    assert sharding.quota("new", ["a", "b"], 60) == 20


def test_preferences_are_a_deterministic_permutation_led_by_the_rendezvous_winners() -> None:
    members = replicas(3)
    order = sharding.preferred_clusters(members[0], members, CLUSTERS[:60])
    assert sorted(order) == sorted(CLUSTERS[:60])
    assert order == sharding.preferred_clusters(members[0], list(reversed(members)), reversed(CLUSTERS[:60]))
    winners = {c for c in CLUSTERS[:60] if max(members, key=lambda r: sharding.score(r, c)) == members[0]}
    assert set(order[: len(winners)]) == winners


@pytest.mark.parametrize("r", [3, 5, 10])
def test_a_fresh_start_is_balanced_within_one(r: int) -> None:
    assignment = sharding.assign(replicas(r), CLUSTERS)
    shares = Counter(assignment.values())
    assert len(assignment) == len(CLUSTERS)
    assert max(shares.values()) - min(shares.values()) <= 1


def test_sixty_clusters_on_three_replicas_is_twenty_each() -> None:
    assert sorted(Counter(sharding.assign(replicas(3), CLUSTERS[:60]).values()).values()) == [20, 20, 20]


@pytest.mark.parametrize(("before", "after"), [(3, 4), (4, 2), (5, 6), (10, 9), (10, 11), (3, 5)])
def test_a_scale_event_moves_no_more_than_the_minimum(before: int, after: int) -> None:
    members_before, members_after = replicas(before), replicas(after)
    start = sharding.assign(members_before, CLUSTERS)
    holdings = holdings_of(start, members_after)  # departed replicas' clusters are free
    end = sharding.converge(holdings, CLUSTERS)
    moved = sum(1 for c in CLUSTERS if start[c] != end[c])
    assert moved <= 1.2 * minimum_moves(start, members_after, len(CLUSTERS))
    shares = Counter(end.values())
    assert max(shares.values()) - min(shares.values()) <= 1


def test_an_over_quota_replica_hands_off_its_least_preferred_clusters() -> None:
    members = replicas(2)
    owned = CLUSTERS[:10]
    step = sharding.plan(me=members[0], replicas=members, desired=owned, owned=owned)
    assert (step.quota, step.want, step.acquire) == (5, 0, [])
    order = sharding.preferred_clusters(members[0], members, owned)
    assert sorted(step.hand_off) == sorted(order[5:])


def test_undesired_clusters_are_dropped_and_others_leases_are_not_candidates() -> None:
    members = replicas(2)
    step = sharding.plan(
        me=members[0],
        replicas=members,
        desired=CLUSTERS[:10],
        owned=["gone", CLUSTERS[0]],
        others={CLUSTERS[1]: members[1], CLUSTERS[2]: "dead-but-unexpired"},
    )
    assert step.drop == ["gone"]
    assert step.want == 4
    assert set(step.acquire) == set(CLUSTERS[3:10])
