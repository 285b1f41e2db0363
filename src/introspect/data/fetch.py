"""Third-party data files by name: a folder the user gives, the cache, or a checked download.

Why: presets must not read paths outside the package, and the project does not redistribute
third-party data. A dataset is named (``mmlu200``); its file is looked up, in order, in the
folder given by ``--data-dir`` (or ``$INTROSPECT_DATA_DIR``), then in the cache, then fetched
from its public source into the cache and accepted only if its sha256 matches the one pinned
here (``pooch`` downloads to a temporary file and moves it into place, so a failed or wrong
download leaves nothing behind). Offline and absent, the error is one line naming the file and
the flag that supplies it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from introspect.data.files import DataError


@dataclass(frozen=True)
class Dataset:
    """One pinned third-party file: where it comes from and what it must hash to."""

    name: str
    filename: str
    url: str
    sha256: str
    source: str
    license: str


DATASETS: dict[str, Dataset] = {
    d.name: d for d in (
        Dataset(
            name="mmlu200",
            filename="evals_sandbagging_mmlu200.jsonl",
            # openai/evals stores it in Git LFS; the LFS object id is this file's sha256
            url=("https://media.githubusercontent.com/media/openai/evals/"
                 "3b90d1198ef0499a6d13297734818853694e3f08/evals/registry/data/sandbagging/samples-all.jsonl"),
            sha256="41577f1230458da144c599bc8effd4c19183f8c3e684f5e5e26118876ed7829a",
            source="200 MMLU items (Hendrycks et al. 2021) via openai/evals registry/data/sandbagging",
            license="MIT",
        ),
    )
}


def data_dir(given: str | os.PathLike | None = None) -> Path | None:
    """The user's data folder: ``given``, else ``$INTROSPECT_DATA_DIR``, else none."""
    d = given or os.environ.get("INTROSPECT_DATA_DIR")
    return Path(d) if d else None


def cache_root() -> Path:
    """Where converted weights, concept vectors and downloads live (``INTROSPECT_CACHE`` overrides);
    defined here, below the engine, so that data files and weights share one root."""
    return Path(os.environ.get("INTROSPECT_CACHE", Path.home() / ".cache" / "introspect"))


def cache_dir() -> Path:
    return cache_root() / "data"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resolve(spec: str, given_dir: str | os.PathLike | None = None, *, download: bool = True,
            registry: dict[str, Dataset] | None = None) -> Path:
    """A file path for ``spec``: an existing path as is, or a registered dataset's name."""
    reg = DATASETS if registry is None else registry
    if spec not in reg:
        p = Path(spec).expanduser()
        if p.is_file():
            return p
        names = ", ".join(sorted(reg))
        raise DataError(f"{spec}: no such file and not a dataset name; give a path or one of: {names}")
    d = reg[spec]
    folder = data_dir(given_dir)
    if folder is not None:
        p = folder / d.filename
        if p.is_file():
            return p
        raise DataError(f"{p}: file not found; --data-dir {folder} must hold {d.filename} ({d.source})")
    cached = cache_dir() / d.filename
    if cached.is_file() and sha256(cached) == d.sha256:
        return cached
    if not download:
        raise DataError(f"{d.filename} not found: give --data-dir DIR holding it ({d.source}, {d.license})")
    return _download(d, cached)


def _download(d: Dataset, dest: Path) -> Path:
    import pooch

    dest.parent.mkdir(parents=True, exist_ok=True)
    pooch.get_logger().setLevel("WARNING")  # the outcome is ours to report, in one line
    try:
        got = pooch.retrieve(d.url, known_hash=f"sha256:{d.sha256}", fname=dest.name,
                             path=dest.parent, progressbar=False,
                             downloader=pooch.HTTPDownloader(timeout=30, progressbar=False))
    except ValueError as e:  # pooch: the hash does not match (the download is removed)
        raise DataError(f"{d.filename}: the download from {d.url} does not match its pinned sha256; "
                        f"give --data-dir DIR holding the file ({d.source})") from e
    except Exception as e:  # offline, refused, HTTP error
        raise DataError(f"{d.filename} not found and could not be downloaded ({type(e).__name__}); "
                        f"give --data-dir DIR holding it ({d.source}, {d.license})") from e
    return Path(got)
