"""What ``train-aware`` prints besides training: saved adapters' damage gates measured again,
two trainings compared, a training log read back, and the lines that report gates and checks.

Why apart from the trainer's flags: these readers and printers act on saved adapters and their
records, not on a training run, and they are what a reader of a positive control looks at.
"""

from __future__ import annotations

import json
from pathlib import Path

from introspect.cli.common import command


def gates_again(adapters: list[Path], scale: float, folder: Path | None = None, twins: int = 1,
                 yardsticks: list[str] | None = None) -> int:
    """``--gates DIR [DIR ...]``: each saved adapter's damage gates at ``scale`` (beside ``twins``
    random twins and the ``yardsticks``, all of them for an empty list), printed with whether it may
    be called a positive control and written atomically to ``folder`` (default DIR; for several
    DIRs, FOLDER/<DIR's name>/); for several, how many pass every gate. Every DIR is checked before
    the first (slow) measurement."""
    from introspect.engine.load.adapters import check_scale, read_adapter
    from introspect.records.atomic import atomic_write_text
    from introspect.train.data import TrainDataError
    from introspect.train.gates import positive_control
    from introspect.train.remeasure import saved_gates
    from introspect.train.yardsticks import YARDSTICKS, check_names

    if folder is not None and folder.exists() and not folder.is_dir():
        raise TrainDataError(f"--out {folder} is a file: with --gates it names the folder that receives "
                             "damage_gates_xS.json")
    if twins < 1:
        raise TrainDataError(f"--twins {twins}: want an integer >= 1 (e.g. --twins 5)")
    check_scale(scale)
    names = check_names(() if yardsticks is None else (yardsticks or YARDSTICKS))
    dirs = [Path(a).expanduser() for a in adapters]
    if len({d.resolve() for d in dirs}) < len(dirs):
        raise TrainDataError("--gates names an adapter twice: each DIR once (k of n counts trainings)")
    if folder is not None and len(dirs) > 1 and len({d.name for d in dirs}) < len(dirs):
        raise TrainDataError(f"--gates DIRs share a folder name, and --out {folder} receives one subfolder per "
                             "DIR's name: rename one or measure them apart")
    for d in dirs:
        read_adapter(d)  # a missing or tampered adapter stops here, before any measurement
    dest = {d: d if folder is None else folder if len(dirs) == 1 else folder / d.name for d in dirs}
    failing = []
    for d in dirs:
        g = saved_gates(d, scale, twins=twins, yardsticks=names)
        out = dest[d] / f"damage_gates_x{g['scale']:g}.json"
        atomic_write_text(out, json.dumps(g, indent=1, sort_keys=True) + "\n")
        print(f"{d}: adapter {g['adapter_hash']} at scale {g['scale']:g}: " + gates_line(g))
        print(control_line(g))
        print(f"wrote {out}")
        if not positive_control(g)[0]:
            failing.append(str(d))
    if len(dirs) > 1:
        print(k_of_n(len(dirs) - len(failing), len(dirs), failing))
    return 0


def k_of_n(k: int, n: int, failing: list[str]) -> str:
    """How many trainings pass every gate, and which do not."""
    return f"{k} of {n} trainings pass every gate" + (f" (not: {', '.join(failing)})" if failing else "")


def diff(first: Path, second: Path) -> int:
    """``--diff DIR1 DIR2``: one line per difference in what produced the two adapters, causes first."""
    from introspect.engine.load.adapters import read_adapter
    from introspect.train.provenance import differences

    a, b = read_adapter(first)[0], read_adapter(second)[0]  # hashes checked: a stale directory is refused
    lines = differences(a, b)
    print(f"{first} and {second}: " + ("the same weights" if not lines else f"{len(lines) - 1} other difference(s)"))
    for line in lines:
        print("  " + line)
    return 0


def losses(adapter: Path, windows: int, bands: list[float] | None = None) -> int:
    """``--losses DIR``: the training log by row kind, framing, stretch of training (and strength)."""
    from introspect.train import losses as LS
    from introspect.train.data import TrainDataError

    if windows < 1:
        raise TrainDataError(f"--windows {windows}: want an integer >= 1 (e.g. --windows 4)")
    if bands is not None and (len(bands) < 2 or any(b >= c for b, c in zip(bands, bands[1:]))):
        raise TrainDataError(f"--bands {' '.join(f'{b:g}' for b in bands)}: want two or more increasing "
                             "edges (e.g. --bands 0.15 0.5 0.9 1.25)")
    table = LS.by_kind(LS.read_log(adapter), windows=windows, strength_bands=bands)
    print(f"{adapter}: detection rows by kind, framing and steps (loss: mean answer cross-entropy; p_first: "
          "mean probability of the first answer token; right: share with p_first > 0.5)")
    print(LS.render(table))
    return 0


def _g2(v: float | None) -> str:
    """A KL in the gates line: two significant figures, or n/a."""
    return "n/a" if v is None else format(v, ".2g")


def _p2(v: float | None) -> str:
    """A share in the gates line: two decimals, or n/a."""
    return "n/a" if v is None else f"{v:.2f}"


def _twins_part(g: dict) -> str:
    """With several random twins: each reading's range over them and where the adapter's falls."""
    each = g.get("replay_random_twins") or []
    if len(each) < 2 or g.get("replay_top1") is None:
        return ""
    parts = []
    for key, mine, what, better in (("identical", "replay_identical", "identical", "at or above"),
                                    ("top1", "replay_top1", "top token kept", "at or above"),
                                    ("kl", "replay_kl", "KL", "below")):
        vals = [t[key] for t in each]
        n = sum(g[mine] >= v if better == "at or above" else g[mine] < v for v in vals)
        fmt = _g2 if key == "kl" else (lambda v: f"{v:.2f}")
        parts.append(f"{what} {fmt(min(vals))}–{fmt(max(vals))} (the adapter's {better} {n} of them)")
    return f"; over {len(each)} random changes: " + ", ".join(parts)


def _yardsticks_part(g: dict) -> str:
    """The base model changed as its users call the same model: identity, KL and top token of each."""
    each = g.get("replay_yardsticks") or []
    return "".join(f"; {y['what']}: identical {_p2(y['identical'])}, KL {_g2(y['kl'])}, top token kept {_p2(y['top1'])}"
                   for y in each)


def _figure(k: str, v: float | None) -> str:
    """A gate's figure in the gates line: KL to three significant figures, a share to two decimals
    (the top token to three, as its bound), or n/a."""
    return "n/a" if v is None else format(v, ".3g") if k == "replay_kl" else (
        f"{v:.3f}" if k == "replay_top1" else f"{v:.2f}")


def gates_line(g: dict) -> str:
    """Each gate's figure, bound and pass/fail, then the readings beside them (the figures are in
    the summary's JSON too)."""
    f = _p2
    marks = {True: "pass", False: "FAIL", None: "not measured"}
    return ("damage gates: " + "; ".join(f"{k} {_figure(k, g.get(k))} ({g['gates'][k]}: {marks[g['passed'][k]]})"
                                         for k in g["passed"])
            + f"; readings over {g['replay_n']} held-out replay prompts: greedy answers identical to the base "
            f"model's {f(g.get('replay_identical'))} (the base model decoded again {f(g['replay_identical_base'])}, "
            f"a random weight change of the adapter's size {f(g.get('replay_identical_random'))})"
            + (f"; the random change teacher-forced: KL {_g2(g.get('replay_kl_random'))}, top token the base "
               f"model's {f(g.get('replay_top1_random'))}" if g.get("replay_top1") is not None else "")
            + _twins_part(g) + _yardsticks_part(g)
            + f"; detection phrases of the base model {f(g.get('detection_phrases_base'))}; right answers of the "
            f"adapter under injection {f(g.get('content_answers'))}, of the base model under the same injection "
            f"{f(g['content_answers_base'])}, without one {f(g.get('content_answers_clean_base'))}"
            + (f" ({g['content_known']} of {g.get('content_n')} questions), of which it keeps "
               f"{f(g.get('content_kept_base'))} under the same injection" if g.get("content_known") is not None else "")
            + "".join(f"\n  caught by the detection-phrase gate: {t!r}" for t in g.get("detection_phrases_examples", ())))


def control_line(g: dict) -> str:
    """Whether the adapter may be called a positive control (``all_passed``: every gate passed),
    and which gates failed or were not measured."""
    from introspect.train.gates import positive_control

    ok, failed, missing = positive_control(g)
    why = [f"failed: {', '.join(failed)}"] * bool(failed) + [f"not measured: {', '.join(missing)}"] * bool(missing)
    return "positive control: " + ("yes (every damage gate passed)" if ok else f"no ({'; '.join(why) or 'no gates'})")


def report_check(model, out: Path, layer: int, cfg, n: int) -> None:
    """Greedy yes-rates with and without injection, on training and held-out concepts, in the
    paper framing and, when it was trained, the two-turn one."""
    import yaml

    from introspect.train.check import detection_check
    from introspect.train.data import TWO_TURN

    mid = sum(cfg.strength) / 2
    for phrasing in ("paper", *((TWO_TURN,) if TWO_TURN in cfg.phrasings else ())):
        for split in ("train", "heldout"):
            words = yaml.safe_load((out / f"words_{split}.yaml").read_text())["targets"][:n]
            r = detection_check(model, words, layer, mid, phrasing=phrasing)
            print(f"check {split} (strength {mid:g} resid, greedy, {phrasing} prompt): yes injected "
                  f"{r['yes_injected']:.2f}, yes clean {r['yes_clean']:.2f}, yes random direction "
                  f"{r['yes_random']:.2f}, names the concept {r['identified']:.2f}")
    print(f"per-kind training losses: {command('train-aware')} --losses {out}")
