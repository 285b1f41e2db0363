"""Adapters to other ecosystems (layer 8): Inspect (``integrations.inspect``)."""
