"""Running: conversations to token ids (``chat``), injection specs and their hooks (``inject``),
and ``decode``, the one place that generates (per-row seeded streams, shared-prefix KV cache,
stop strings, log-probs at marked steps)."""
