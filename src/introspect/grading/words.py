"""Word forms and word matching shared by every grader and by the prompt leak checks.

Two notions of "the same word", kept apart on purpose:

* ``word_forms`` — plural/singular only. Prompt leak checks and decoy lists use it, so widening it
  would silently change which prompts are rejected.
* ``inflections`` — what identification accepts: the plural/singular forms plus -ing, -ed,
  possessive ('s, s') forms; case never matters. Synonyms and related words are *not* forms: only
  the optional LLM judge (``introspect.tasks.judge``) may accept those, and it reports separately.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_ARTICLES = ("a", "an", "the")
_STRIP = " \t\r\n\"'`*_.,;:!?()[]{}<>“”‘’«»"
_VOWELS = "aeiouy"


def plain(text: str) -> str:
    """Straight apostrophes/quotes (same length, so match positions stay valid)."""
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


def word_forms(word: str) -> set[str]:
    """Case-folded surface forms treated as the same word: plural (s/es/ies) and simple singular."""
    w = word.casefold().strip()
    if not w:
        return set()
    forms = {w, w + "s", w + "es"}
    if len(w) > 2 and w.endswith("y") and w[-2] not in "aeiou":
        forms.add(w[:-1] + "ies")
    if len(w) > 4 and w.endswith("ies"):
        forms.add(w[:-3] + "y")
    if len(w) > 3 and w.endswith("es"):
        forms.add(w[:-2])
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        forms.add(w[:-1])
    return forms


def _verb_forms(w: str) -> set[str]:
    """-ing and -ed forms of a (single, lower-case) stem, with the usual spelling rules."""
    out = {w + "ing", w + "ed"}
    if len(w) > 2 and w.endswith("e") and not w.endswith(("ee", "ye", "oe")):
        out |= {w[:-1] + "ing", w + "d"}
    if len(w) > 2 and w.endswith("y") and w[-2] not in _VOWELS:
        out.add(w[:-1] + "ied")
    if (len(w) >= 3 and w[-1] not in _VOWELS + "wx" and w[-2] in _VOWELS and w[-3] not in _VOWELS
            and len(w) <= 4):  # short CVC stems double: run -> running, snow stays snowing
        out |= {w + w[-1] + "ing", w + w[-1] + "ed"}
    return out


def inflections(word: str) -> set[str]:
    """Every form identification accepts for ``word``: ``word_forms`` plus -ing/-ed/possessive.

    Multi-word concepts inflect their last word only ("hot dog" -> "hot dogs").
    """
    w = " ".join(word.casefold().split())
    if not w:
        return set()
    head, _, last = w.rpartition(" ")
    lead = head + " " if head else ""
    stems = word_forms(last)
    forms = set(stems)
    for s in stems:
        forms |= _verb_forms(s)
    forms |= {f + "'s" for f in stems if not f.endswith("s")} | {f + "'" for f in stems if f.endswith("s")}
    forms |= {f + "'s" for f in stems if f.endswith("s")}
    return {lead + f for f in forms}


def _alternation(forms: set[str]) -> str:
    alts = sorted(forms, key=len, reverse=True)
    return "|".join(r"\s+".join(map(re.escape, f.split())) for f in alts) or r"(?!x)x"


def forms_pattern(word: str) -> re.Pattern[str]:
    """Case-insensitive regex for any ``word_forms`` of ``word`` as a whole word (multi-word allowed)."""
    return re.compile(rf"(?<!\w)(?:{_alternation(word_forms(word))})(?!\w)", re.IGNORECASE)


def concept_pattern(word: str) -> re.Pattern[str]:
    """Case-insensitive regex for any ``inflections`` of ``word`` as a whole word.

    Straight apostrophes only: run texts through ``plain`` first.
    """
    return re.compile(rf"(?<!\w)(?:{_alternation(inflections(word))})(?!\w)", re.IGNORECASE)


def normalize_word(text: str) -> str:
    """Case-fold, trim punctuation/quotes/markdown and a leading article."""
    t = text.casefold().strip().strip(_STRIP)
    parts = t.split()
    if len(parts) > 1 and parts[0] in _ARTICLES:
        t = " ".join(parts[1:])
    return t.strip(_STRIP)


def word_match(candidate: str | None, target: str | None, *, inflected: bool = False) -> bool:
    """True if ``candidate`` names ``target`` up to case, punctuation, article and number.

    ``inflected=True`` also accepts -ing/-ed/possessive forms (``inflections``): the rule
    identification uses. Never synonyms.
    """
    if not candidate or not target:
        return False
    c, t = normalize_word(plain(candidate)), normalize_word(plain(target))
    if not c or not t:
        return False
    forms = inflections if inflected else word_forms
    return c == t or c in forms(t) or t in forms(c)


class _FormIndex:
    """Words seen so far, indexed by surface form, to ask "does this word ``word_match`` any of
    them?" in time independent of how many there are (testing every pair is quadratic)."""

    def __init__(self) -> None:
        self.exact: dict[str, int] = {}   # normalised word -> first index
        self.formed: dict[str, int] = {}  # any of its word_forms -> first index

    def add(self, word: str, i: int) -> None:
        c = normalize_word(plain(word))
        if c:
            self.exact.setdefault(c, i)
            for f in word_forms(c):
                self.formed.setdefault(f, i)

    def first_match(self, word: str) -> int | None:
        """Smallest index of an added word that ``word_match`` calls the same as ``word``."""
        t = normalize_word(plain(word))
        if not t:
            return None
        # word_match: word is a form of other, or other is a form of word (itself one of its forms)
        hits = [i for i in (self.formed.get(t), *(self.exact.get(f) for f in word_forms(t))) if i is not None]
        return min(hits) if hits else None


def first_clash(words: Sequence[str], others: Sequence[str]) -> tuple[str, str] | None:
    """The first (other, word) pair that ``word_match(other, word)`` calls one word, in ``words``
    order then ``others`` order; None if there is none. Indexed by surface form, so linear in the
    lists' lengths: testing every pair took ~50 ms a read of the shipped word file (50 × 100
    words), and a task-A run reads it about twenty times."""
    index = _FormIndex()
    for i, o in enumerate(others):
        index.add(o, i)
    for w in words:
        i = index.first_match(w)
        if i is not None:
            return others[i], w
    return None


def distinct_words(words: Sequence[str], avoid: Sequence[str] = ()) -> list[str]:
    """``words`` in order, without those that ``word_match`` a word in ``avoid`` or one kept before
    them: a decoy list whose every entry is a different word from the answer and from each other.
    Linear in the lists' lengths (the pairwise version took ~5 ms per task-B multiple-choice item)."""
    index = _FormIndex()
    for w in avoid:
        index.add(w, 0)
    kept: list[str] = []
    for w in words:
        if index.first_match(w) is None:
            kept.append(w)
            index.add(w, len(kept))
    return kept


def names_concept(candidate: str | None, target: str | None) -> bool:
    """Identification match of one answer word: ``word_match(..., inflected=True)``."""
    return word_match(candidate, target, inflected=True)


def first_mention(text: str, word: str | None) -> int | None:
    """Character offset of the first mention of any inflection of ``word`` in ``text``, else None."""
    if not word or not word.strip():
        return None
    m = concept_pattern(word).search(plain(text))
    return None if m is None else m.start()


def levenshtein(a: str, b: str) -> int:
    """Edit distance (near-miss analysis only; never a primary score)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def single_word_after(label: str, text: str) -> str | None:
    """The single word after ``LABEL:`` (an article allowed), or None if absent or not one word.

    Ambiguity (the label twice with different words) is malformed, hence None.
    """
    pat = re.compile(
        rf"(?<![A-Za-z_]){label}:[ \t]*(?:(?:a|an|the)[ \t]+)?[\"'`*“‘]*([^\W\d_][\w'-]*)"
        rf"[\"'`*”’]*[ \t]*(?=[.!,;]|$)",
        re.IGNORECASE | re.MULTILINE,
    )
    words = {m.group(1).casefold() for m in pat.finditer(text)}
    return words.pop() if len(words) == 1 else None
