"""Task A's figures on a positive control's held-out concepts, by nearest-training-cosine band and
by category (task-A target or training list), from the adapter's split record.

    introspect by-band RESULTS_DIR --split adapters/smollm2-L20/split.json [--markdown]

Why: "held out" is a matter of degree. A concept whose nearest training concept has cosine 0.45
tells less about generalisation than one at 0.15, so the same summary (``summarize``, the
report's intervals) is computed on each band's and each category's concepts alone, with the
number of concepts each rests on. Bands with fewer than 3 concepts are shown without intervals
by the summariser itself. Bad input is one ``error:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from introspect.cli.common import Parser, command

METRICS = ("net", "identification_vs_random", "follows_vector", "latent_identification_vs_random",
           "latent_follows_vector", "net_vs_random", "net_beyond_yes_bias")


def groups(split: dict, beyond_nouns: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Held-out words by band ("cos 0.30-0.40"), by category ("task-A target", "training list")
    and, among the training list, by kind (``beyond_nouns``: train_words.yaml's ``more_words``)."""
    out: dict[str, list[str]] = {}
    for w, info in split.get("heldout_nearest", {}).items():
        out.setdefault(f"cos {info['band']}", []).append(w)
        out.setdefault(str(info.get("category", "held out")), []).append(w)
        if w in beyond_nouns:
            out.setdefault("beyond concrete nouns", []).append(w)
    return dict(sorted(out.items()))


def more_words(train_words_file: Path | None) -> frozenset[str]:
    import yaml

    from introspect.data.files import concepts_dir

    data = yaml.safe_load((train_words_file or concepts_dir() / "train_words.yaml").read_text()) or {}
    return frozenset(data.get("more_words") or ())


def table(results: Path, split_file: Path, train_words_file: Path | None = None) -> list[dict]:
    from introspect.report import load_results, summarize

    split = json.loads(split_file.read_text())
    df = load_results(results)
    df = df[df["task"] == "A"] if "task" in df else df
    rows = []
    g = groups(split, more_words(train_words_file))
    for name, words in [("all held out", list(split.get("heldout_nearest", {}))), *g.items()]:
        sub = df[df["word"].isin(words)]
        if sub.empty:
            continue
        s = summarize(sub)
        for (variant, model), part in s[s["metric"].isin(METRICS)].groupby(["variant", "model_id"]):
            r = {"group": name, "model": model, "variant": variant, "concepts": int(sub["word"].nunique())}
            for m in METRICS:
                x = part[part["metric"] == m]
                r[m] = (None if x.empty else
                        f"{x.iloc[0]['value']:.2f} [{x.iloc[0]['lo']:.2f}, {x.iloc[0]['hi']:.2f}]")
            rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("by-band"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--split", type=Path, required=True, help="the adapter's split.json")
    ap.add_argument("--train-words-file", type=Path, help="the training words YAML the adapter used "
                    "(default: the shipped train_words.yaml): its more_words are the 'beyond concrete nouns' group")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    for p, what in ((args.results, "results directory"), (args.split, "split.json")):
        if not p.exists():
            print(f"error: no {what} at {p}; give an existing path", file=sys.stderr)
            return 2
    rows = table(args.results, args.split, args.train_words_file)
    if not rows:
        print(f"error: no task-A records of the split's held-out words under {args.results}", file=sys.stderr)
        return 2
    cols = ["group", "model", "variant", "concepts", *METRICS]
    if args.markdown:
        print("| " + " | ".join(cols) + " |\n|" + " --- |" * len(cols))
        for r in rows:
            print("| " + " | ".join("—" if r[c] is None else str(r[c]) for c in cols) + " |")
    else:
        for r in rows:
            print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
