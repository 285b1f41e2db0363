"""experiments.by_band: the positive control's held-out figures by cosine band and category."""

from __future__ import annotations

import json

from experiments import by_band

SPLIT = {"heldout_nearest": {
    "ocean": {"nearest_train": "coast", "cos": 0.49, "band": "0.40-0.50", "category": "task-A target"},
    "nostalgia": {"nearest_train": "memory", "cos": 0.31, "band": "0.30-0.40", "category": "training list"},
    "violin": {"nearest_train": "knit", "cos": 0.41, "band": "0.40-0.50", "category": "task-A target"}}}


def test_groups_by_band_category_and_kind():
    g = by_band.groups(SPLIT, frozenset({"nostalgia"}))
    assert g == {"beyond concrete nouns": ["nostalgia"], "cos 0.30-0.40": ["nostalgia"],
                 "cos 0.40-0.50": ["ocean", "violin"], "task-A target": ["ocean", "violin"],
                 "training list": ["nostalgia"]}
    assert "nostalgia" not in by_band.groups(SPLIT).get("beyond concrete nouns", [])


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "split.json").write_text(json.dumps(SPLIT))
    assert by_band.main([str(tmp_path / "missing"), "--split", str(tmp_path / "split.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no results directory") and "\n" not in err
    (tmp_path / "empty").mkdir()
    assert by_band.main([str(tmp_path / "empty"), "--split", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.startswith("error: no split.json")
