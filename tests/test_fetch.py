"""Named datasets: a folder the user gives, the cache, a download checked by sha256 (served from
127.0.0.1, never the network), and one-line errors when none of them has the file."""

from __future__ import annotations

import hashlib
import http.server
import threading
from functools import partial
from pathlib import Path

import pytest

from introspect.data import DataError
from introspect.data.fetch import DATASETS, Dataset, resolve

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "evals_sandbagging_mmlu200.jsonl"
BODY = b'{"topic": "t", "question": "Q?\\nA. a\\nB. b\\nAnswer:", "answer": "A"}\n'


@pytest.fixture
def server(tmp_path):
    """A static file server on 127.0.0.1 over ``tmp_path/www``; yields its base URL."""
    www = tmp_path / "www"
    www.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("INTROSPECT_DATA_DIR", raising=False)


def _reg(url: str, body: bytes = BODY) -> dict[str, Dataset]:
    d = Dataset("toy", "toy.jsonl", url, hashlib.sha256(body).hexdigest(), "a toy file", "MIT")
    return {"toy": d}


def test_download_is_checked_cached_and_reused(server, tmp_path):
    www, base = server
    (www / "toy.jsonl").write_bytes(BODY)
    reg = _reg(f"{base}/toy.jsonl")
    p = resolve("toy", registry=reg)
    assert p == tmp_path / "cache" / "data" / "toy.jsonl" and p.read_bytes() == BODY
    (www / "toy.jsonl").unlink()  # the cache answers now, with no server file
    assert resolve("toy", registry=reg) == p


def test_wrong_bytes_are_refused_and_nothing_is_left(server, tmp_path):
    www, base = server
    (www / "toy.jsonl").write_bytes(BODY + b"tampered\n")
    with pytest.raises(DataError, match="does not match its pinned sha256") as e:
        resolve("toy", registry=_reg(f"{base}/toy.jsonl"))
    assert "\n" not in str(e.value) and "--data-dir" in str(e.value)
    cache = tmp_path / "cache" / "data"
    assert not cache.exists() or not any(cache.iterdir())


def test_offline_and_absent_names_the_file_and_the_flag(server):
    _, base = server  # nothing served: a 404, as a missing network answers with an error too
    with pytest.raises(DataError) as e:
        resolve("toy", registry=_reg(f"{base}/missing.jsonl"))
    msg = str(e.value)
    assert "toy.jsonl" in msg and "--data-dir" in msg and "\n" not in msg
    with pytest.raises(DataError, match="toy.jsonl not found: give --data-dir"):
        resolve("toy", registry=_reg(f"{base}/x"), download=False)


def test_data_dir_wins_and_must_hold_the_file(tmp_path, monkeypatch):
    (tmp_path / "toy.jsonl").write_bytes(BODY)
    reg = _reg("http://127.0.0.1:9/never")
    assert resolve("toy", tmp_path, registry=reg) == tmp_path / "toy.jsonl"
    monkeypatch.setenv("INTROSPECT_DATA_DIR", str(tmp_path))
    assert resolve("toy", registry=reg) == tmp_path / "toy.jsonl"
    with pytest.raises(DataError, match="must hold toy.jsonl"):
        resolve("toy", tmp_path / "elsewhere", registry=reg)


def test_paths_pass_and_unknown_names_list_the_datasets(tmp_path):
    f = tmp_path / "items.jsonl"
    f.write_bytes(BODY)
    assert resolve(str(f)) == f
    with pytest.raises(DataError, match="give a path or one of: mmlu200"):
        resolve("mmlu-typo")


@pytest.mark.skipif(not SHARED.is_file(), reason="the shared data folder is not beside the repository")
def test_the_pinned_hash_is_the_shared_files(tmp_path, server):
    """The pin is the real file's sha256 (also openai/evals' Git LFS object id), and a server
    holding those bytes satisfies the real registry entry."""
    www, base = server
    real = DATASETS["mmlu200"]
    assert hashlib.sha256(SHARED.read_bytes()).hexdigest() == real.sha256
    (www / real.filename).write_bytes(SHARED.read_bytes())
    reg = {"mmlu200": Dataset(real.name, real.filename, f"{base}/{real.filename}", real.sha256,
                              real.source, real.license)}
    assert resolve("mmlu200", registry=reg).read_bytes() == SHARED.read_bytes()
    assert resolve("mmlu200", SHARED.parent) == SHARED


# ---------------------------------------------------------------- the command line, offline
MMLU_LINES = "".join(
    f'{{"topic": "t{i % 3}", "question": "Q{i}?\\nA. a{i}\\nB. b{i}\\nC. c{i}\\nD. d{i}\\nAnswer:", "answer": "{"ABCD"[i % 4]}"}}\n'
    for i in range(6))


def test_the_preset_stops_offline_with_one_line_and_runs_with_data_dir(tiny_dir, tmp_path, monkeypatch, capsys):
    """``run --preset selfknowledge-quick --task ability``: with no data folder and no network (the
    source is a refused port on 127.0.0.1), one ``error:`` line naming the file and the flag, exit
    2, nothing written; with ``--data-dir`` holding the file, the task runs."""
    import introspect.data.fetch as F
    from introspect.cli.settings import main

    real = F.DATASETS["mmlu200"]
    monkeypatch.setitem(F.DATASETS, "mmlu200", Dataset(real.name, real.filename, "http://127.0.0.1:9/mmlu.jsonl",
                                                      real.sha256, real.source, real.license))
    args = ["--preset", "selfknowledge-quick", "--task", "ability", "--model", str(tiny_dir("llama")),
            "--option", "ability_n=4"]
    out = tmp_path / "out"
    capsys.readouterr()  # the tiny model's own set-up output
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert real.filename in err[0] and "--data-dir" in err[0]
    assert not out.exists() or not any(out.rglob("*.jsonl"))
    data = tmp_path / "data"
    data.mkdir()
    (data / real.filename).write_text(MMLU_LINES)
    assert main([*args, "--data-dir", str(data), "--out", str(out)]) == 0
    (rec,) = list(out.rglob("ability.jsonl")) or list(out.rglob("*.jsonl"))
    assert sum(1 for line in rec.read_text().splitlines() if '"task": "ability"' in line) == 4
    assert main([*args, "--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o2")]) == 2
    assert "--data-dir" in capsys.readouterr().err
