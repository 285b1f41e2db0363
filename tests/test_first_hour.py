"""A quiet first hour: no deprecation warning from this toolkit's own calls into transformers."""

from __future__ import annotations

import warnings

from introspect import Conversation, generate, render
from introspect.engine.run.decode import next_token_logprobs


def test_decoding_raises_no_future_warning(tiny_model):
    """``past_key_values=`` warns a FutureWarning in transformers 5.x (removed in 5.40): the
    decode loop passes the cache under the name the model class uses."""
    m = tiny_model("llama")
    p = render(m.tokenizer, Conversation.of(("user", "Hello there")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        g = generate(m, [p, p], max_new_tokens=4)
        next_token_logprobs(m, [p])
    assert len(g) == 2 and all(x.tokens for x in g)
