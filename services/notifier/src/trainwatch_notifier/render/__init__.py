"""Pure renderers: facts in, channel-specific JSON bodies out."""
