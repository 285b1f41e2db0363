"""Regenerate the raw answers behind ``graded_answers.yaml`` (the hand-labelled grader test set).

Why a script: the labelled file must be traceable to real model output. This runs the task A
(paper and strict prompts, with and without injection at a few strengths), task C (prefilled word,
with and without retro-injection) and the yes/no bias prompts on one model, sampled at
temperature 1, and writes the answers *without labels*. Labels are added by hand; never by a grader.

    OMP_NUM_THREADS=1 python tests/data/collect_answers.py --out /tmp/raw_answers.yaml

Strength s means α = s × ‖raw mean-difference vector‖ (the replications' raw units).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

A_WORDS = ("bread", "ocean", "violin", "volcano", "thunder")
A_STRENGTHS = (0.0, 2.0, 4.0, 8.0)
SEED_A = (("bread", 0.0), ("ocean", 0.0), ("violin", 4.0), ("thunder", 4.0), ("honey", 0.0), ("honey", 2.0))
C_WORDS = ("bread", "ocean", "violin", "volcano", "thunder", "honey", "lantern", "meadow", "mirror",
           "sugar", "silver", "dust")
C_INJECTED = 8  # the first this many C words are also run with retro-injection at strength 4
BIAS_STRENGTHS = (0.0, 4.0)
VECTOR_TEMPLATE = "Tell me about {word}."  # the user turn the concept vectors are read from


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="YAML file to write (unlabelled answers)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--layer", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--vector-template", default=VECTOR_TEMPLATE,
                    help="user-turn text the concept vectors are read from (chat template applied)")
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; pass a new path (labels are never overwritten)", file=sys.stderr)
        return 2

    import introspect as I
    from introspect.engine.run.decode import generate
    from introspect.engine.run.inject import From, InjectionSpec
    from introspect.engine.vectors import VectorBank
    from introspect.tasks import prompts as P

    model = I.load_model(args.model)
    tok = model.tokenizer
    # pinned (each row records it): the library default may change, the answers on file must not
    bank = VectorBank(model, P.load_words().baseline, template=args.vector_template, chat=True, cache=False)

    def spec(word: str, strength: float, positions):
        if strength == 0:
            return None
        cv = bank.get(word, args.layer)
        return InjectionSpec(args.layer, strength * cv.raw_norm, cv.vector, positions)

    rows: list[dict] = []
    groups: list[tuple[list, list, list, int]] = []  # (prompts, specs, metas, max_new_tokens)

    prompts, specs, metas = [], [], []
    for w in A_WORDS:
        for s in A_STRENGTHS:
            for trial in (1, 2):
                p = I.render(tok, P.task_a_paper(trial))
                prompts.append(p)
                specs.append(spec(w, s, From(p.spans[P.FROM_MARK][0])))
                metas.append(dict(kind="A_paper", prompt_id=f"task_a_paper(trial={trial})", word=w, strength=s))
    for w, s in SEED_A:
        p = I.render(tok, P.task_a_seed(1))
        prompts.append(p)
        specs.append(spec(w, s, From(p.spans[P.FROM_MARK][0])))
        metas.append(dict(kind="A_seed", prompt_id="task_a_seed(trial=1)", word=w, strength=s))
    groups.append((prompts, specs, metas, 48))

    sentences = P.load_sentences()
    prompts, specs, metas = [], [], []
    for i, w in enumerate(C_WORDS):
        for s in (0.0, 4.0) if i < C_INJECTED else (0.0,):
            form = "seed" if i % 4 == 3 else "paper"
            p = I.render(tok, P.task_c(sentences[i], w, form=form))
            prompts.append(p)
            specs.append(spec(w, s, p.positions(P.SENTENCE_MARK)))
            metas.append(dict(kind=f"C_{form}", prompt_id=f"task_c(sentence={i}, form={form})", word=w, strength=s))
    groups.append((prompts, specs, metas, 40))

    questions = P.load_bias_questions()
    prompts, specs, metas = [], [], []
    for qi, q in enumerate(questions[:4]):
        for s in BIAS_STRENGTHS:
            w = A_WORDS[qi % len(A_WORDS)]
            p = I.render(tok, P.task_a_bias(q))
            prompts.append(p)
            specs.append(spec(w, s, From(p.spans[P.FROM_MARK][0])))
            metas.append(dict(kind="bias", prompt_id=f"task_a_bias(question={qi})", word=w, strength=s))
    groups.append((prompts, specs, metas, 24))

    for prompts, specs, metas, n_new in groups:
        for p, sp, meta in zip(prompts, specs, metas):  # one call per answer: its own seed, so
            seed = args.seed + len(rows)                  # rows never share a sample stream
            g = generate(model, [p], [sp], max_new_tokens=n_new, do_sample=True, temperature=1.0, seed=seed)[0]
            rows.append(dict(id=f"{args.model.split('-')[0]}-{args.seed}-{len(rows):03d}", model=args.model,
                             layer=args.layer, vector_template=args.vector_template, **meta,
                             seed=seed, answer=g.text))
    args.out.write_text(yaml.safe_dump({"answers": rows}, sort_keys=False, allow_unicode=True, width=100))
    print(f"wrote {len(rows)} answers to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
