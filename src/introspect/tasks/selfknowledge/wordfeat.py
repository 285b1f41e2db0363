"""The association task's surface: what about an option word, not about the model, predicts it.

Why frequency beside length: a model that lists common words and predicts "I would list it" for
common words reads above chance on association without knowing anything about itself; word length
alone misses that (short words are common, but not all common words are short). The frequency is
``wordfreq``'s Zipf value in English (log10 of uses per billion words; 0 for a word it does not
know), an optional extra (``pip install 'introspect[wordfreq]'``: its code is Apache-2.0, its data
CC-BY-SA 4.0, so it is a dependency and never bundled). Without it the baseline is length only,
and the summary says so (``surface_word_frequency`` 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd


def zipf() -> Callable[[str], float] | None:
    """``wordfreq``'s English Zipf frequency of a word, or None where the extra is not installed."""
    try:
        from wordfreq import zipf_frequency
    except ImportError:
        return None
    return lambda w: float(zipf_frequency(w, "en"))


def word_features(words: Sequence[str]) -> pd.DataFrame:
    """Per option word: characters, words and, with ``wordfreq``, its Zipf frequency (``zipf``)."""
    x = pd.DataFrame({"chars": [len(w) for w in words], "words": [len(w.split()) for w in words]})
    f = zipf()
    if f is not None:
        x["zipf"] = [f(w) for w in words]
    return x
