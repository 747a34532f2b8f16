"""``python -m trainwatch_watcher``: run one watcher replica from TRAINWATCH_* settings."""

from trainwatch_watcher.app import run

if __name__ == "__main__":
    run()
