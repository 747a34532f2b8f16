"""The watcher's exceptions. Retry decisions go by class, never by message.

::

    WatcherError
    ├── ClusterError                 something about one cluster; never stops another
    │   ├── ConnectionUnavailable    the registry (or the kubeconfig folder) has no usable connection
    │   ├── InvalidKubeconfig        the kubeconfig cannot be used (no server, bad PEM...)
    │   ├── Unreachable              TCP/TLS/HTTP transport failure, timeout, 5xx
    │   │   ├── WatchStalled         a watch stream said nothing for longer than the read timeout
    │   │   ├── StorageInitializing  429: the kind's storage is (re)initializing; the expected wait
    │   │   ├── StreamAbandoned      an open watch that the server no longer backs (probe failed)
    │   │   └── ServerAddressRefused the server resolves to an address the policy refuses
    │   ├── ResponseTooLarge         an answer or a watch line over its size bound
    │   ├── Unauthorized             401 or 403: the credentials are refused
    │   ├── KindNotServed            404 on a kind's list or watch: its CRD is gone
    │   └── ApiError                 any other non-2xx answer (carries the status code)
    ├── WatchExpired                 410 Gone: the resourceVersion is too old; relist
    │   └── ResourceVersionAhead     the server is behind our resourceVersion (etcd restored); relist
    ├── LeaseNotProven               the cluster's lease is no longer proven: publish nothing more
    │   └── CheckpointFenced         a newer owner's epoch refused this checkpoint write
    └── HistoryDiverged              the JOBS stream holds another event under an id we published
"""

from __future__ import annotations


class WatcherError(Exception):
    """Base of every exception the watcher raises on purpose."""


class ClusterError(WatcherError):
    """A failure confined to one cluster."""


class ConnectionUnavailable(ClusterError):
    """No connection config could be obtained for the cluster."""


class InvalidKubeconfig(ClusterError):
    """The kubeconfig was obtained but cannot be used."""


class Unreachable(ClusterError):
    """The API server could not be reached or answered with a server error."""


class WatchStalled(Unreachable):
    """A watch stream was silent for longer than the read timeout (a silent partition)."""


class StorageInitializing(Unreachable):
    """429 (``storage is (re)initializing``, or any Too Many Requests): a real apiserver answers
    this for a CRD kind's first requests and for every kind after a restart. Waited out, not a
    failure."""


class StreamAbandoned(Unreachable):
    """An open watch stream was given up: a probe on a new connection showed the server behind it
    no longer answers (SIGTERMed, partitioned) or that the stream missed events."""


class ServerAddressRefused(Unreachable):
    """The server's address (as written, or as resolved at connect time) is refused by the address
    policy (loopback, link-local, cloud metadata). Retried like an outage: DNS may change."""


class ResponseTooLarge(ClusterError):
    """An API server's answer, or one line of a watch stream, is larger than its bound."""


class Unauthorized(ClusterError):
    """The API server refused the credentials (401) or the permissions (403)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class KindNotServed(ClusterError):
    """The API server does not serve the kind (404): the CRD is not installed or was removed."""


class ApiError(ClusterError):
    """Another non-2xx answer from the API server."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class WatchExpired(WatcherError):
    """410 Gone: the resourceVersion or continue token is too old; the informer relists."""


class ResourceVersionAhead(WatchExpired):
    """Our resourceVersion is ahead of the server's (etcd wiped or restored from a backup, a cluster
    re-created behind the same endpoint). A real apiserver answers such a watch with 200 and then
    silence, so this is detected by comparing versions; the answer is a relist, as for a 410."""


class LeaseNotProven(WatcherError):
    """This replica can no longer prove its lease on the cluster: publishing now could emit beside
    a new owner, so the informer stops before it publishes (the claim loop then stops the cluster)."""


class CheckpointFenced(LeaseNotProven):
    """A newer owner holds the cluster (its epoch moved on): this checkpoint write was refused."""


class HistoryDiverged(WatcherError):
    """JetStream already held a different event under the id just published (another owner's
    late event took it first): the informer starts again from what the stream holds."""
