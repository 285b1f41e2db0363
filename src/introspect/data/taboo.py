"""Word-association lists (BIG-bench taboo, Kovah Taboo-Data, the project's SEB words), each checked against its layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.data.files import DataError, clean_words, read_json, read_yaml
from introspect.grading import word_match


@dataclass(frozen=True)
class TabooItem:
    """A target word and words associated with it (BIG-bench taboo / Kovah Taboo-Data)."""

    target: str
    related: tuple[str, ...]


_BB_FMT = 'BIG-bench taboo JSON: {"examples": [{"target": str, "taboos": [str, ...]}, ...]}'


def load_bigbench_taboo(path: Path | str) -> list[TabooItem]:
    """BIG-bench ``taboo`` task JSON (``examples`` of target + taboos; the canary is ignored)."""
    p, data = read_json(path, _BB_FMT)
    ex = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(ex, list):
        raise DataError(f"{p}: no 'examples' list; expected {_BB_FMT}")
    out = []
    for e in ex:
        if not (isinstance(e, dict) and isinstance(e.get("target"), str)
                and isinstance(e.get("taboos"), list)):
            raise DataError(f"{p}: example {e!r:.60} lacks target/taboos; expected {_BB_FMT}")
        related = tuple(w for w in clean_words(e["taboos"]) if not word_match(w, e["target"]))
        out.append(TabooItem(e["target"].strip(), related))
    if not out:
        raise DataError(f"{p}: 'examples' is empty; expected {_BB_FMT}")
    return out


_KOVAH_FMT = ('Kovah Taboo-Data category JSON: {"word": ["taboo", ...], ...} '
              'or [{"word": str, "taboo": [str, ...]}, ...]')


def load_kovah_taboo(path: Path | str) -> list[TabooItem]:
    """A Kovah Taboo-Data category file (e.g. ``src/data/en/animals.json``).

    Accepts the repository's shape, an object mapping each target word to its taboo words, and
    a list of objects with a target under ``word`` (or ``target``) and words under ``taboo``
    (or ``taboos`` / ``related``). Empty strings and repeated or self-referencing words are
    dropped; targets left with no related word are skipped.
    """
    p, data = read_json(path, _KOVAH_FMT)
    pairs: list[tuple[Any, Any]] = []
    if isinstance(data, dict):
        pairs = list(data.items())
    elif isinstance(data, list):
        for e in data:
            if not isinstance(e, dict):
                raise DataError(f"{p}: list entry {e!r:.40} is not an object; expected {_KOVAH_FMT}")
            word = e.get("word", e.get("target"))
            taboo = e.get("taboo", e.get("taboos", e.get("related")))
            pairs.append((word, taboo))
    else:
        raise DataError(f"{p}: top level is {type(data).__name__}; expected {_KOVAH_FMT}")
    out = []
    for word, taboo in pairs:
        if not isinstance(word, str) or not isinstance(taboo, list):
            raise DataError(f"{p}: entry {word!r:.40} has no word list; expected {_KOVAH_FMT}")
        related = tuple(w for w in clean_words(taboo) if not word_match(w, word))
        if word.strip() and related:
            out.append(TabooItem(word.strip(), related))
    if not out:
        raise DataError(f"{p}: no target words; expected {_KOVAH_FMT}")
    return out


_SEBW_FMT = "YAML mapping 'targets:' of target word -> list of option words"


def load_association_targets(path: Path | str | None = None) -> list[TabooItem]:
    """``concepts/seb_words.yaml`` (or a file in that layout): targets with option words."""
    p, data = read_yaml(path, "seb_words.yaml", _SEBW_FMT)
    targets = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, dict) or not targets:
        raise DataError(f"{p}: no 'targets' mapping; expected {_SEBW_FMT}")
    out = []
    for word, opts in targets.items():
        if not isinstance(word, str) or not isinstance(opts, list) or not clean_words(opts):
            raise DataError(f"{p}: target {word!r} has no option words; expected {_SEBW_FMT}")
        out.append(TabooItem(word, tuple(w for w in clean_words(opts) if not word_match(w, word))))
    return out
