"""Which concepts the adapter trains on and which it never sees: a split by meaning, not spelling.

Why by meaning: a split that checks plurals only leaves near-synonyms on both sides (bumblebee
held out, bee and honeybee trained; meteorite held out, meteor trained), so "held-out concepts"
would be held out in spelling only. Here two words are *near* when

* their concept vectors, built by the toolkit at the model and layer trained (``act(word) −``
  the baseline mean, exactly what training injects), have cosine ≥ ``max_cos``; or
* a rule says so without the model (``near_by_rule``): the same word up to plural, a compound or
  stem (one word begins or ends the other: honeybee/bee, meteorite/meteor), or a hand-listed
  synonym the vectors miss (``SYNONYMS``).

Every held-out word is near no training word; a word near a held-out word leaves training (it
is recorded as dropped, with the reason); words near a large share of all candidates (``HUB_SHARE``)
are dropped from both sides first, since either side they would leak or empty the other. Task-A
targets are held out first, then a seeded draw of the training list, each extra costing at most
``MAX_COST`` training words. For every held-out word the split records its nearest training word
and cosine, so results can be reported by nearest-training-cosine band (``band``) and by
category (``category``: task-A target or training list).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from introspect.grading import word_match

MAX_COS = 0.5
"""Held-out words have cosine below this to every training word (centred concept vectors at the
trained layer). Measured on smollm2-135m-instruct, layer 20, the 370 candidates (50 task-A targets
+ 320 training words; 2026-11-25): pairwise cosines have median 0.01 and 90th percentile 0.40, 4.6%
of pairs reach 0.5; known near-synonyms lie above it (bumblebee–bee 0.67, honeybee–bee 0.64,
boat–ship 0.69, meteorite–meteor 0.56, dinner–lunch 0.90, clothes–clothing 0.91). Some synonyms the
vectors do not bring together (supper–dinner 0.07, tub–bath 0.34, boat–skiff 0.09) are caught by
``SYNONYMS`` instead. Lower thresholds empty the training list (at 0.4 each word is near 36 others
on average)."""

HUB_SHARE = 0.1
"""A word near more than this share of all candidates is dropped from both sides. On the model
above at 0.5: 41 of 370 words, short ambiguous nouns (gate, ridge, cap, tank, box, bell); kept,
each would either leak into many held-out words or push dozens of words out of training."""

MAX_COST = 1
"""A held-out word drawn from the training list may push at most this many more words out of
training (its near neighbours not already out); task-A targets are held out whatever they cost."""

MIN_STEM = 3
"""Shortest word the compound/stem rule looks for at the start or end of another (bee in honeybee)."""

SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("dinner", "supper", "lunch", "breakfast", "meal"),
    ("bath", "tub", "bathtub"),
    ("boat", "ship", "skiff", "vessel", "canoe", "yacht"),
    ("bee", "bumblebee", "honeybee", "wasp"),
    ("meteor", "meteorite", "asteroid", "comet"),
    ("clothes", "clothing", "garment", "apparel"),
    ("rock", "stone", "pebble", "boulder"),
    ("sofa", "couch"),
    ("automobile", "car"),
    ("ocean", "sea"),
    ("cavern", "cave"),
    ("river", "stream", "creek", "brook"),
    ("road", "street", "highway", "lane"),
    ("hill", "mountain", "mound"),
    ("cup", "mug"),
    ("forest", "wood", "woods", "jungle"),
)
"""Hand-listed groups of near-synonyms a reader would call one concept, for pairs the vectors at
one layer may not bring together (supper–dinner has cosine 0.07 on the default model). Kept short
and conservative: a pair listed here is never split across training and held out."""

BANDS = (0.2, 0.3, 0.4)
"""Edges of the nearest-training-cosine bands results are reported by (the last band ends at
the split's ``max_cos``)."""

SPLIT_FILE = "split.json"
RULES = ("meaning", "spelling")  # the split rules a run may use


class SplitError(ValueError):
    """A split that cannot be made or a resume whose split differs (one line, exit 2, in the CLI)."""


def _stem(w: str) -> str:
    w = w.casefold().strip()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


_SYN = {w: i for i, group in enumerate(SYNONYMS) for w in group}


def near_by_rule(a: str, b: str) -> bool:
    """True if ``a`` and ``b`` are one concept by a rule that needs no model: the same word up to
    plural (``word_match``), one begins or ends the other (a compound or stem: honeybee/bee,
    meteorite/meteor; the shorter at least ``MIN_STEM`` letters), or one ``SYNONYMS`` group."""
    if word_match(a, b):
        return True
    x, y = _stem(a), _stem(b)
    if not x or not y:
        return False
    if x in _SYN and _SYN[x] == _SYN.get(y):
        return True
    s, long = sorted((x, y), key=len)
    return len(s) >= MIN_STEM and s != long and (long.startswith(s) or long.endswith(s))


def tokens(text: str) -> set[str]:
    """The lower-case alphabetic words of a text (for leak scans)."""
    return set(re.findall(r"[a-z]+", text.casefold()))


def band(cos: float, max_cos: float = MAX_COS, edges: Sequence[float] = BANDS) -> str:
    """The nearest-training-cosine band of a held-out word, e.g. ``"0.30-0.40"``."""
    cuts = [e for e in edges if e < max_cos]
    lo = None
    for e in cuts:
        if cos < e:
            return f"<{e:.2f}" if lo is None else f"{lo:.2f}-{e:.2f}"
        lo = e
    return f"{lo if lo is not None else float('-inf'):.2f}-{max_cos:.2f}"


def file_sha256(path: Path | str) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True)
class Split:
    """Training and held-out concepts, what was dropped and why, and each held-out word's nearest
    training word (by concept-vector cosine; ``None`` under the spelling rule)."""

    rule: str  # "meaning" or "spelling"
    train: tuple[str, ...]
    heldout: tuple[str, ...]
    max_cos: float | None = None
    dropped: dict[str, str] = field(default_factory=dict)  # word -> reason
    nearest: dict[str, tuple[str, float]] = field(default_factory=dict)  # held-out word -> (training word, cos)
    targets: tuple[str, ...] = ()  # task-A targets (the "target" category)

    def category(self, word: str) -> str:
        return "task-A target" if word in self.targets else "training list"

    def band(self, word: str) -> str | None:
        if word not in self.nearest:
            return None
        return band(self.nearest[word][1], self.max_cos if self.max_cos is not None else 1.0)

    def identity(self) -> dict[str, Any]:
        """What a resume must match: the rule, its threshold and both word lists."""
        return {"rule": self.rule, "max_cos": self.max_cos, "train": list(self.train), "heldout": list(self.heldout)}

    def to_dict(self) -> dict[str, Any]:
        return {**self.identity(), "targets": list(self.targets), "dropped": dict(self.dropped),
                "heldout_nearest": {w: {"nearest_train": n, "cos": round(c, 4), "band": self.band(w),
                                        "category": self.category(w)} for w, (n, c) in self.nearest.items()}}


def differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """A short account of how two split identities differ, or None if they are the same."""
    parts = []
    for k in ("rule", "max_cos"):
        if old.get(k) != new.get(k):
            parts.append(f"{k} {old.get(k)} then, {new.get(k)} now")
    for k in ("heldout", "train"):
        a, b = set(old.get(k) or ()), set(new.get(k) or ())
        if a != b:
            gone, came = sorted(a - b), sorted(b - a)
            bits = ([f"+{', +'.join(came[:3])}{' …' if len(came) > 3 else ''}"] if came else []) + \
                   ([f"-{', -'.join(gone[:3])}{' …' if len(gone) > 3 else ''}"] if gone else [])
            parts.append(f"{k} {' '.join(bits)}")
        elif list(old.get(k) or ()) != list(new.get(k) or ()):
            parts.append(f"{k} order")
    return "; ".join(parts) or None


# ---------------------------------------------------------------- the split itself
def meaning_split(words: Sequence[str], vectors: Mapping[str, torch.Tensor], *, targets: Sequence[str] = (),
                  seed: int, heldout_frac: float, max_cos: float = MAX_COS, hub_share: float = HUB_SHARE,
                  max_cost: int = MAX_COST, min_train: int = 2, train_only: Sequence[str] = ()) -> Split:
    """Split ``targets`` (held out first) and ``words`` (the training list) by meaning.

    ``vectors``: each word's concept vector at the trained layer (any norm). Deterministic given
    ``seed``. ``heldout_frac`` of the training list is held out besides the targets, as far as
    ``max_cost`` allows (fewer if too few words are isolated enough). ``train_only``: words that may
    train but are never drawn for holding out (they occur in the training prompts themselves).
    """
    if not 0 <= heldout_frac < 1:
        raise SplitError(f"heldout_frac must be in [0, 1), got {heldout_frac}")
    if not 0 < max_cos < 1:
        raise SplitError(f"max_cos must be in (0, 1), got {max_cos}")
    tset = list(dict.fromkeys(targets))
    pool = [w for w in dict.fromkeys(words) if w not in tset]
    allw = [*tset, *pool]
    missing = [w for w in allw if w not in vectors]
    if missing:
        raise SplitError(f"no concept vector for {missing[0]!r}")
    n = len(allw)
    V = torch.stack([vectors[w].detach().float().cpu().flatten() for w in allw])
    V = V / V.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = V @ V.T
    near = cos >= max_cos
    for i in range(n):
        for j in range(i + 1, n):
            if not near[i, j] and near_by_rule(allw[i], allw[j]):
                near[i, j] = near[j, i] = True
    near.fill_diagonal_(False)
    nbrs = [set(near[i].nonzero().flatten().tolist()) for i in range(n)]
    dropped: dict[str, str] = {}
    hub = {i for i in range(n) if len(nbrs[i]) > hub_share * max(n - 1, 1)}
    for i in sorted(hub):
        dropped[allw[i]] = f"near {len(nbrs[i])} of {n - 1} other words (hub)"
    held: list[int] = []
    out_of_train: dict[int, int] = {}  # index -> the held-out word that pushed it out

    def hold(i: int) -> None:
        held.append(i)
        for j in nbrs[i]:
            if j not in hub:
                out_of_train.setdefault(j, i)

    for i in range(len(tset)):
        if i not in hub:
            hold(i)
    never = set(train_only)
    order = [i for i in range(len(tset), n) if i not in hub and allw[i] not in never]
    rng = random.Random(f"meaning-split:{seed}")
    order = rng.sample(order, len(order))
    want = round(heldout_frac * len(pool))
    extra = 0
    for i in order:
        if extra >= want:
            break
        hs = set(held)
        cost = sum(1 for j in nbrs[i] if j not in hub and j not in hs and j not in out_of_train)
        if cost <= max_cost:
            hold(i)
            extra += 1
    hs = set(held)
    train_idx = [i for i in range(len(tset), n) if i not in hub and i not in hs and i not in out_of_train]
    for i, by in out_of_train.items():
        if i not in hs:
            why = f"cos {float(cos[i, by]):.2f}" if float(cos[i, by]) >= max_cos else "by rule"
            dropped[allw[i]] = f"near held-out {allw[by]!r} ({why})"
    if len(train_idx) < min_train:
        raise SplitError(f"only {len(train_idx)} training concepts after the meaning split (max_cos {max_cos}); "
                         "raise --max-cos or give more training words")
    nearest: dict[str, tuple[str, float]] = {}
    if train_idx:
        sub = cos[:, train_idx]
        for i in held:
            k = int(sub[i].argmax())
            nearest[allw[i]] = (allw[train_idx[k]], float(sub[i, k]))
    train = tuple(sorted(allw[i] for i in train_idx))
    heldout = tuple([allw[i] for i in held if i < len(tset)] + sorted(allw[i] for i in held if i >= len(tset)))
    return Split("meaning", train, heldout, float(max_cos), dropped, nearest, tuple(tset))



def nearest_training(heldout: Sequence[str], train: Sequence[str],
                     vectors: Mapping[str, torch.Tensor]) -> dict[str, tuple[str, float]]:
    """Each held-out word's nearest training word by concept-vector cosine, and that cosine."""
    if not train or not heldout:
        return {}
    def unit(ws: Sequence[str]) -> torch.Tensor:
        m = torch.stack([vectors[w].detach().float().cpu().flatten() for w in ws])
        return m / m.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = unit(heldout) @ unit(train).T
    best = cos.max(dim=1)
    return {w: (train[int(k)], float(c)) for w, c, k in zip(heldout, best.values, best.indices)}


def make_split(model: Any, layer: int, train_words: Sequence[str], targets: Sequence[str], baseline: Sequence[str], *,
               seed: int, heldout_frac: float, rule: str = "meaning", max_cos: float = MAX_COS,
               avoid: Sequence[str] = (), train_texts: Sequence[str] = ()) -> tuple[Split, dict[str, torch.Tensor]]:
    """The split a training run uses, and the concept vectors (unit, at ``layer``) of its words.

    Both rules first drop words that are a form of a baseline word or occur in an ``avoid`` text
    (task A's prompts): they enter neither list. ``rule="meaning"``: ``meaning_split`` over the
    toolkit's concept vectors of targets and training words at ``layer``, words occurring in a
    ``train_texts`` text (the training prompts) never held out. ``rule="spelling"``: the old
    plural-only split (``data.split_concepts``), its nearest-training cosines recorded all the same.
    """
    from introspect.engine.vectors import build_concept_vectors
    from introspect.tasks import prompts as P
    from introspect.train import data as D

    if rule not in RULES:
        raise SplitError(f"unknown split rule {rule!r}; use {' or '.join(RULES)}")
    if rule == "spelling":
        train, held = D.split_concepts(train_words, targets, baseline, seed=seed, heldout_frac=heldout_frac, avoid=avoid)
        cvs = build_concept_vectors(model, [*held, *train], [layer], baseline)
        vecs = {w: cvs[(w, layer)].vector for w in (*held, *train)}
        return Split("spelling", tuple(train), tuple(held), None, {}, nearest_training(held, train, vecs),
                     tuple(dict.fromkeys(targets))), vecs
    pool, gone = [], {}
    for w in dict.fromkeys(train_words):
        base = next((b for b in baseline if word_match(w, b)), None)
        if base is not None:
            gone[w] = f"a form of baseline word {base!r}"
        elif any(P.leaks(t, w) for t in avoid):
            gone[w] = "occurs in task A's prompts"
        else:
            pool.append(w)
    words = list(dict.fromkeys([*targets, *pool]))
    cvs = build_concept_vectors(model, words, [layer], baseline)
    vecs = {w: cvs[(w, layer)].vector for w in words}
    split = meaning_split(pool, vecs, targets=targets, seed=seed, heldout_frac=heldout_frac, max_cos=max_cos,
                          train_only=[w for w in pool if any(P.leaks(t, w) for t in train_texts)])
    return replace(split, dropped={**gone, **split.dropped}), vecs


def words_yaml(targets: list[str], baseline: list[str], note: str, split: Split | None = None) -> str:
    """A word file (targets, baseline) whose held-out targets carry their nearest training word,
    cosine, band and category as comments, so a reader sees how far each one was held out."""
    def line(w: str) -> str:
        if split is None or w not in split.nearest:
            return f"  - {w}"
        near, cos = split.nearest[w]
        return f"  - {w}  # nearest training word {near}, cos {cos:.2f} (band {split.band(w)}; {split.category(w)})"
    lines = [f"# {note}", "targets:", *[line(w) for w in targets], "baseline:", *[f"  - {w}" for w in baseline]]
    return "\n".join(lines) + "\n"
