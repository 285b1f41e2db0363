"""The engine every task stands on: ``load`` (weights to a TransformerLens bridge), ``run`` (chat
templates, injection hooks, the one decode loop) and ``vectors`` (concept vectors from batched
activations). Tasks hand it prompts and injection specs; they never see caches, RNGs or devices."""
