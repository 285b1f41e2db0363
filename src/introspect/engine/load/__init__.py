"""Loading: a model name (registry entry, hub id, local directory or GGUF file) to HF weights, a
tokenizer and a booted ``TransformerBridge`` on its devices, with the kernels chosen at load
(attention implementation, fast path) and adapters merged. The only code that knows where weights
come from and where they live."""
