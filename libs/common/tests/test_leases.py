import pytest
from redis.asyncio import Redis

from trainwatch_common import LeaseManager
from trainwatch_common.leases import LeaseNotReplicated
from trainwatch_common.testing import RedisServer


@pytest.fixture
async def leases(redis_url: str):  # type: ignore[no-untyped-def]
    client = Redis.from_url(redis_url)
    yield LeaseManager(client, ttl_ms=10_000)
    await client.aclose()


async def test_one_holder_at_a_time_with_growing_epochs(leases: LeaseManager) -> None:
    first = await leases.acquire("c1", "replica-a")
    assert first is not None
    assert first.epoch == 1
    assert await leases.acquire("c1", "replica-b") is None
    assert await leases.holder_of("c1") == ("replica-a", 1)
    assert await leases.renew(first)
    assert await leases.release(first)
    second = await leases.acquire("c1", "replica-b")
    assert second is not None
    assert second.epoch == 2
    assert await leases.current_epoch("c1") == 2


async def test_a_stale_owner_cannot_renew_or_release(leases: LeaseManager) -> None:
    old = await leases.acquire("c1", "replica-a")
    assert old is not None
    await leases.release(old)
    new = await leases.acquire("c1", "replica-a")  # same holder name, new epoch
    assert new is not None
    assert not await leases.renew(old)
    assert not await leases.release(old)
    assert await leases.holder_of("c1") == ("replica-a", new.epoch)


async def test_lease_expires_after_ttl(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    try:
        short = LeaseManager(client, ttl_ms=50)
        lease = await short.acquire("c1", "a")
        assert lease is not None
        from trainwatch_common.testing import eventually

        taken = await eventually(lambda: short.acquire("c1", "b"), timeout=5, message="lease expiry")
        assert taken.holder == "b"
        assert taken.epoch == lease.epoch + 1
        assert not await short.renew(lease)
    finally:
        await client.aclose()


async def test_epochs_survive_a_redis_restart(redis_process: RedisServer) -> None:
    client = Redis.from_url(redis_process.url)
    try:
        leases = LeaseManager(client)
        assert (await leases.acquire("c1", "a")) is not None
        redis_process.restart()
        await client.aclose()
        client = Redis.from_url(redis_process.url)
        leases = LeaseManager(client)
        assert await leases.current_epoch("c1") == 1
    finally:
        await client.aclose()


async def test_renew_many_renews_held_leases_in_one_round_trip_and_refuses_stale_ones(
    leases: LeaseManager,
) -> None:
    held = [await leases.acquire(f"c{i}", "replica-a") for i in range(3)]
    assert all(lease is not None for lease in held)
    stale = held[1]
    assert stale is not None
    await leases.release(stale)
    taken = await leases.acquire("c1", "replica-b")
    assert taken is not None
    assert await leases.renew_many([lease for lease in held if lease is not None]) == [True, False, True]
    assert await leases.holder_of("c1") == ("replica-b", taken.epoch)
    assert await leases.renew_many([]) == []


async def test_with_replicas_required_an_unconfirmed_acquisition_or_renewal_does_not_count(
    redis_url: str,
) -> None:
    """A Redis without replicas never confirms: nothing acquired may be used, and it is given back."""
    client = Redis.from_url(redis_url)
    try:
        plain = LeaseManager(client, ttl_ms=10_000)
        waiting = LeaseManager(client, ttl_ms=10_000, replicas=1, replication_timeout_ms=50)
        with pytest.raises(LeaseNotReplicated):
            await waiting.acquire("c1", "a")
        assert await plain.holder_of("c1") is None  # released again: not blocking c1 for a TTL
        held = await plain.acquire("c2", "a")
        assert held is not None
        with pytest.raises(LeaseNotReplicated):
            await waiting.renew(held)
        assert await plain.renew(held)
    finally:
        await client.aclose()
