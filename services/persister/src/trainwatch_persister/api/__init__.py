"""The query API: routers, dependencies, response models and cursors."""
