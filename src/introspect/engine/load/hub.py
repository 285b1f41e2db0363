"""Hub snapshots and weight folders: where the files are, what identifies them, what to call them.

Why: transformers 5 no longer records the commit a hub model came from (``config._commit_hash``),
and hashing every parameter after each load costs minutes on a 70B model in every shard. A hub
model is therefore fetched as a snapshot first (``snapshot_download``: its folder is named by the
commit, progress bars shown, a gated repository a one-line hint about ``HF_TOKEN``), and any
local folder is identified by the sha256 of its weight and config files, each hashed once and
remembered by (path, size, mtime); files in the hub cache are already named by their digest.
A local folder or file is *called* by its own name, never by an absolute path.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from contextlib import contextmanager
from pathlib import Path

from introspect.engine.load import gguf_files
from introspect.engine.load.gguf_files import ModelError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
IDENTITY_FILES = ("config.json", "generation_config.json")
# never needed to run a transformers model: original checkpoints, other frameworks' weights
SKIP = ["original/*", "consolidated*", "*.pth", "*.msgpack", "*.h5", "*.onnx", "*.ot", "*.tflite", "*.gguf",
        "*.mlmodel", "*.nemo"]
_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _complete(folder: Path) -> bool:
    """A snapshot folder with a config and every weight file it names (a sharded model's index
    lists its shards; an interrupted download leaves some missing)."""
    if not (folder / "config.json").is_file():
        return False
    for index in folder.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError):
            return False
        if not shards or not all((folder / s).is_file() for s in shards):
            return False
    return any(f.suffix in WEIGHT_SUFFIXES for f in folder.iterdir())


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The complete local snapshot of a hub model, found without touching the network (no repo
    listing, no token: a cached gated model loads on an air-gapped node), or None."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, ignore_patterns=list(SKIP),
                                        local_files_only=True))
    except Exception:  # not cached (or a cache this huggingface_hub cannot read): go online
        return None
    return folder if folder.is_dir() and _complete(folder) else None


def snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot folder of a hub model: the cached one when it is complete (offline
    first), else downloaded (only what transformers loads: safetensors when the repo has them,
    else ``.bin``)."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub import errors as E

    cached = cached_snapshot(repo_id, revision)
    if cached is not None:
        return cached
    skip = list(SKIP)
    try:
        try:
            files = HfApi().list_repo_files(repo_id, revision=revision)
        except (E.GatedRepoError, E.RepositoryNotFoundError, E.RevisionNotFoundError):
            raise
        except Exception:  # offline or unreachable: the cache decides below
            files = []
        if any(f.endswith(".safetensors") for f in files):
            skip.append("*.bin")
        with _download_bars():
            return Path(snapshot_download(repo_id, revision=revision, ignore_patterns=skip))
    except E.GatedRepoError as e:
        raise ModelError(f"{repo_id} is a gated repository: accept its license at https://huggingface.co/{repo_id} "
                         "and set HF_TOKEN (or run `hf auth login`)") from e
    except E.RevisionNotFoundError as e:
        raise ModelError(f"{repo_id} has no revision {revision!r}") from e
    except E.RepositoryNotFoundError as e:
        raise ModelError(f"no model {repo_id!r} on the hub (a private repository needs HF_TOKEN)") from e
    except E.LocalEntryNotFoundError as e:
        raise ModelError(f"{repo_id} is not in the local hub cache and the hub cannot be reached; download it "
                         f"where there is network (`hf download {repo_id}`) or unset HF_HUB_OFFLINE") from e


@contextmanager
def _download_bars():
    """Download progress shown even where transformers' loading bars are off (they share a switch)."""
    from huggingface_hub import utils

    was_off = utils.are_progress_bars_disabled()
    utils.enable_progress_bars()
    try:
        yield
    finally:
        if was_off:
            utils.disable_progress_bars()


def hub_origin(path: Path) -> tuple[str, str] | None:
    """(repo id, commit) if ``path`` is a hub-cache snapshot folder (``models--org--name/snapshots/<commit>``)."""
    path = Path(path).expanduser().absolute()
    repo = path.parent.parent.name
    if path.parent.name == "snapshots" and _HEX.fullmatch(path.name) and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/"), path.name
    return None


REMEMBER_BYTES = 64 << 20  # smaller files are hashed again (milliseconds) rather than remembered


def _file_digest(path: Path, index: Path) -> str:
    real = path.resolve()
    if real.parent.name == "blobs" and _HEX.fullmatch(real.name):
        return real.name  # the hub cache names every blob by its own digest
    if real.stat().st_size < REMEMBER_BYTES:
        return gguf_files.file_sha256(real)
    return gguf_files.cached_sha256(path, index)


def folder_fingerprint(path: Path, index: Path) -> str:
    """sha256 over a model folder's weight and config files (each file hashed once, then remembered)."""
    path = Path(path)
    files = sorted(f for f in path.rglob("*") if f.is_file() and
                   (f.name in IDENTITY_FILES or f.suffix in WEIGHT_SUFFIXES))
    if not any(f.suffix in WEIGHT_SUFFIXES for f in files):
        raise ModelError(f"{path} holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(path).as_posix().encode())
        h.update(_file_digest(f, index).encode())
    return f"sha256:{h.hexdigest()[:16]}"


def display_name(name_or_path: str) -> str:
    """How records and reports call a local model: a hub snapshot by its repo id, a folder or a
    GGUF file by its own name (without ``.gguf``); anything else (a hub id) as given."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        origin = hub_origin(p)
        return origin[0] if origin else p.resolve().name
    if p.is_file():
        return p.name[:-5] if p.name.lower().endswith(".gguf") else p.name
    return name_or_path


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def weights_bytes(path: Path, float_bytes: int) -> int:
    """Bytes the folder's weights take once loaded with floats of ``float_bytes`` each (read from
    safetensors headers: no tensor data is touched; ``.bin`` files count at their file size)."""
    total = 0
    for f in Path(path).rglob("*"):
        if f.suffix == ".safetensors":
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            for name, t in header.items():
                if name == "__metadata__":
                    continue
                numel = 1
                for d in t["shape"]:
                    numel *= d
                is_float = t["dtype"].startswith(("F", "BF"))
                total += numel * (float_bytes if is_float else _DTYPE_BYTES.get(t["dtype"], 4))
        elif f.suffix in (".bin", ".pt") and f.is_file():
            total += f.stat().st_size
    return total
