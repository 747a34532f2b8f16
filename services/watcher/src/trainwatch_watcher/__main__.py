"""``python -m trainwatch_watcher``: run one watcher replica from TRAINWATCH_* settings."""

import gc

from trainwatch_watcher.app import run

if __name__ == "__main__":
    # The imported modules (~70k objects) live as long as the process. Frozen, they are out of
    # the cyclic collector's way: the decoded watch events set off a full collection every few
    # thousand events, and rescanning them measured ~9% of the CPU per event at 20k events/s
    # (bench/watch_ingest does the same before it measures).
    gc.freeze()
    run()
