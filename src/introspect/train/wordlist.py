"""Derive the training concept list (concepts/train_words.yaml) from WordNet 3.0's database files.

Why WordNet: it is well kept, permissively licensed (the WordNet 3.0 licence: use, copy, modify and
distribute for any purpose, with its notice kept), ships offline (Debian's ``wordnet-base``
puts it in /usr/share/wordnet), and labels every noun sense with a lexicographer file, so concrete
nouns (artifacts, animals, foods, plants, objects, substances) can be picked by rule rather than
by hand. The rule: single lowercase alphabetic lemmas whose most frequent sense is a concrete
noun, used mainly as nouns in WordNet's sense-tagged corpus, ranked by that corpus's tag count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")
# Technical, abstract or ambiguous lemmas that the sense-tagged (Brown) corpus ranks high, taken out
# by hand so the list is of things a reader pictures at once.
EXCLUDE = ("surface material cell product anode piece particle equipment device facility agent fraction "
           "steps instrument saline fluid holder protein apparatus conjugate effluent recording mixture "
           "thyroglobulin fiber formulation subsection aerator antigen arms builder impurity manifold micelle "
           "micrometeorite receiver transducer fallout constituent layer phosphate agglutinin andrena cathode "
           "commuter etcetera ion output pegboard ration anionic beebread enzyme iodide landing quirt works "
           "dilution dipole dose filling interchange loading manometer pseudophloem polyphosphate quarters "
           "suspension thermocouple slit additive adjunct colors motif drug opium cigarette liquor whisky "
           "whiskey champagne beer wine bomb bomber gun rifle bullet weapon pistol missile musket cannon "
           "ammunition artillery firearm bayonet sword knife axe cartridge theatre").split()
CONCRETE_LEXFILES = {5: "noun.animal", 6: "noun.artifact", 13: "noun.food", 17: "noun.object",
                     20: "noun.plant", 27: "noun.substance"}


def _synsets(data_noun: Iterable[str]) -> dict[str, tuple[int, tuple[str, ...]]]:
    """offset -> (lexicographer file number, the synset's words as written) from ``data.noun``."""
    out = {}
    for line in data_noun:
        if line.startswith(" "):
            continue  # the licence header
        f = line.split(" ")
        n = int(f[3], 16)
        out[f[0]] = (int(f[1]), tuple(f[4 + 2 * i] for i in range(n)))
    return out


def concrete_nouns(index_noun: Iterable[str], data_noun: Iterable[str], cntlist: Iterable[str], *,
                   min_count: int = 3, noun_share: float = 0.7, concrete_share: float = 0.6,
                   min_len: int = 3) -> list[tuple[str, int]]:
    """(lemma, noun tag count) of concrete common nouns, most frequent first.

    From WordNet's ``index.noun`` (senses of a lemma, most frequent first), ``data.noun`` (each
    synset's lexicographer file and words) and ``cntlist.rev`` (``lemma%pos:lexfile:... sense
    count`` per sense, pos 1 = noun). A lemma qualifies when it is lowercase and alphabetic, its
    first sense is a concrete noun written in lowercase (not a name such as Europe), at least
    ``concrete_share`` of its noun tag count is on concrete senses, its noun senses carry at least
    ``noun_share`` of its tag count, and that count is at least ``min_count``.
    """
    syn = _synsets(data_noun)
    senses: dict[str, list[str]] = {}
    for line in index_noun:
        if line.startswith(" "):
            continue
        f = line.split()
        n_syn, n_ptr = int(f[2]), int(f[3])
        senses[f[0]] = f[-n_syn:] if n_syn else []
        del n_ptr
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    other: dict[str, int] = defaultdict(int)
    for line in cntlist:
        parts = line.split()
        if len(parts) != 3 or "%" not in parts[0]:
            continue
        lemma, _, rest = parts[0].partition("%")
        if rest.split(":")[0] == "1":
            counts[lemma][int(parts[1])] = int(parts[2])
        else:
            other[lemma] += int(parts[2])
    out = []
    for lemma, offsets in senses.items():
        if not (lemma.isalpha() and lemma.islower() and len(lemma) >= min_len) or not offsets:
            continue
        lex, words = syn[offsets[0]]
        if lex not in CONCRETE_LEXFILES or lemma not in words:  # absent as written: a capitalised name
            continue
        by_sense = counts.get(lemma, {})
        total = sum(by_sense.values())
        concrete = sum(c for i, c in by_sense.items() if i <= len(offsets) and syn[offsets[i - 1]][0] in CONCRETE_LEXFILES)
        if total >= min_count and concrete >= concrete_share * total and total >= noun_share * (total + other[lemma]):
            out.append((lemma, total))
    return sorted(out, key=lambda x: (-x[1], x[0]))


def pick_words(ranked: Sequence[tuple[str, int]], exclude: Sequence[str], n: int) -> list[str]:
    """The ``n`` most frequent candidates that are no form of an excluded word (nor of each other)."""
    from introspect.grading import word_match

    chosen: list[str] = []
    for w, _ in ranked:
        if len(chosen) == n:
            break
        if not any(word_match(w, x) for x in (*exclude, *chosen)):
            chosen.append(w)
    return chosen


def from_wordnet(exclude: Sequence[str], n: int = 320, root: Path = WORDNET_DIR, min_count: int = 3) -> list[str]:
    """The list as concepts/train_words.yaml holds it (alphabetical)."""
    paths = [root / f for f in ("index.noun", "data.noun", "cntlist.rev")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{missing[0]} not found; install WordNet's data (Debian: apt-get install wordnet-base)")
    ix, dn, cl = (p.read_text(encoding="utf-8").splitlines() for p in paths)
    ranked = [(w, c) for w, c in concrete_nouns(ix, dn, cl, min_count=min_count) if w not in EXCLUDE]
    return sorted(pick_words(ranked, exclude, n))
