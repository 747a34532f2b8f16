"""Pure normalization of job statuses (reference §3): one module per kind family, no I/O."""

from trainwatch_watcher.kinds.catalog import Normalizer, normalize_object, normalizer_for
from trainwatch_watcher.kinds.model import MalformedObject, NormalizedStatus, is_owned_by_higher_level_job

__all__ = [
    "MalformedObject",
    "NormalizedStatus",
    "Normalizer",
    "is_owned_by_higher_level_job",
    "normalize_object",
    "normalizer_for",
]
