"""Run the toolkit inside Inspect: the ``introspect`` model provider and Inspect logs as records."""
