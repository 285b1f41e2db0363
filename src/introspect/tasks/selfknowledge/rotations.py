"""Letter-free multiple-choice decisions: each item asked under every cyclic rotation of its
options, read by permutation averaging, with PriDe's letter prior beside it.

Why: a small model that answers "A" whatever the question gets right exactly the items keyed A,
so a letter argmax makes "its errors" the items not keyed A and any confidence built on P(key)
separates them by the letter bias alone (the Delegate Game's `confidence_auroc` of 1.00 on all
three installed models). Asking each item with its options cyclically rotated puts every option
(its content) at every letter once, so a bias towards a letter lifts every option equally.

The reading. Rotation r moves option i to letter (i + r) mod n; P_r is the letter distribution
there. An option's **permutation-averaged score** is the mean over rotations of the probability
of the letter it sits at, s(i) = mean_r P_r((i + r) mod n); the decision is its argmax (ties,
which a model with no signal about the content produces exactly, broken by a stream keyed by the
item, so an uninformed item answers at chance rather than "the first option"), P(correct) is
s(key), the entropy is that of s. Beside it: the raw decision (rotation 0 = the item as asked
elsewhere), the raw argmax letter under every rotation and **rotation consistency** (the same
option chosen under every rotation).

Which debiasing, and why. This is the "cyclic permutation" debiasing that PriDe (Zheng et al.
2024, *Large Language Models Are Not Robust Multiple Choice Selectors*, ICLR) approximates:
PriDe models the observed distribution as P_obs(d_i) ∝ P_prior(d_i) · P_debiased(o at d_i) and
estimates the prior from cyclic rotations as softmax over letters of the mean over rotations of
log P_r(letter) (each content visits each letter once, so the content term is a constant); it
then divides an unrotated distribution by that prior. With rotations on every item, averaging is
available at no extra cost and needs no model of how prior and content combine, so it is the
decision; PriDe's prior (per item, then averaged over the items) is reported as what the bias
is, and its prior-divided rotation-0 reading (``pride_*``) as the debiasing one would use where
only the unrotated item is asked (the game phase). Not contextual calibration (Zhao et al.
2021): it estimates the prior from a content-free input ("N/A") the model never answers in the
task, where PriDe's prior comes from the model's own answers to these items with every content
at every letter, and it would cost prompts the rotations already pay for.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from introspect.data import MCQuestion
from introspect.data.files import LETTERS

TIE = 1e-9  # option scores closer than this are a tie
FLOOR = 1e-12  # probabilities floored before a log (a letter the model never says)


def rotations(q: MCQuestion) -> list[MCQuestion]:
    """The item under every cyclic rotation: ``rotations(q)[r]`` has its key at letter
    (key + r) mod n; rotation 0 is the item itself."""
    return [q.rotated(r) for r in range(len(q.options))]


def item_prior(probs: Sequence[Sequence[float]]) -> list[float]:
    """PriDe's prior over letters from one item's cyclic rotations: softmax of the mean over
    rotations of log P_r(letter)."""
    n = len(probs[0])
    m = [sum(math.log(max(FLOOR, p[j])) for p in probs) / len(probs) for j in range(n)]
    top = max(m)
    e = [math.exp(x - top) for x in m]
    return [x / sum(e) for x in e]


def letter_prior(items: Sequence[Sequence[Sequence[float]]]) -> list[float]:
    """PriDe's prior over letters for a set of items (each a list of per-rotation letter
    distributions): the items' priors averaged."""
    priors = [item_prior(p) for p in items]
    return [sum(p[j] for p in priors) / len(priors) for j in range(len(priors[0]))]


def pride(p0: Sequence[float], prior: Sequence[float]) -> list[float]:
    """PriDe's debiased distribution: P(letter) / prior(letter), renormalised."""
    x = [p / max(FLOOR, q) for p, q in zip(p0, prior)]
    return [v / sum(x) for v in x]


def _argmax(xs: Sequence[float], tie_key: str) -> int:
    top = max(xs)
    best = [i for i, x in enumerate(xs) if top - x <= TIE]
    return best[0] if len(best) == 1 else random.Random(f"rotation-tie:{tie_key}").choice(best)


def entropy(ps: Sequence[float]) -> float:
    s = sum(ps)
    return float(-sum(p / s * math.log(p / s) for p in ps if p > 0))


def read_rotations(probs: Sequence[Sequence[float]], key: str, tie_key: str,
                   prior: Sequence[float] | None = None) -> dict[str, Any]:
    """The letter-free reading of one item from ``probs[r]``, the letter distribution under
    rotation r (letters in order A, B, ...), ``key`` the item's key letter in rotation 0.

    Returns the decision (``choice``: the letter of the chosen option in rotation 0;
    ``correct``, ``p_correct`` = its key option's score, ``entropy``, ``option_scores`` by
    rotation-0 letter), ``rotation_letters`` (the raw argmax letter under each rotation),
    ``rotation_consistent`` (one option chosen under every rotation) and, with ``prior``,
    PriDe's prior-divided rotation-0 reading (``pride_choice``, ``pride_correct``,
    ``pride_p_correct``)."""
    n = len(probs)
    if n < 2 or any(len(p) != n for p in probs):
        raise ValueError(f"need one letter distribution over n letters per rotation, n >= 2; got {n}")
    k = LETTERS.index(key)
    scores = [sum(probs[r][(i + r) % n] for r in range(n)) / n for i in range(n)]
    raw = [max(range(n), key=p.__getitem__) for p in probs]
    chosen = [(j - r) % n for r, j in enumerate(raw)]  # the option each rotation's argmax names
    c = _argmax(scores, tie_key)
    out = {"choice": LETTERS[c], "correct": c == k, "p_correct": scores[k], "entropy": entropy(scores),
           "option_scores": {LETTERS[i]: s for i, s in enumerate(scores)}, "rotations": n,
           "rotation_letters": [LETTERS[j] for j in raw], "rotation_consistent": len(set(chosen)) == 1}
    if prior is not None:
        d = pride(probs[0], prior)
        pc = _argmax(d, tie_key)
        out.update(pride_choice=LETTERS[pc], pride_correct=pc == k, pride_p_correct=d[k])
    return out
