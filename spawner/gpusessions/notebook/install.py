"""Install the notebook-side parts into an environment: `python -m gpusessions.notebook.install`.

A wheel install puts them in place by itself (pyproject's shared-data: the lab extension built
from labextension/ and the server extension's config). An editable install (`pip install -e`,
as `make` does for the local cluster) builds the lab extension into notebook/labextension and
copies it into the environment once; the Makefile then runs this, which links
<prefix>/share/jupyter/labextensions/@gpusessions/notices to the build instead (as
`jupyter labextension develop` does), so a rebuild (`jlpm build`, `jlpm watch` in labextension/)
is what JupyterLab loads, and enables the server extension in
<prefix>/etc/jupyter/jupyter_server_config.d.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpusessions.notebook import LABEXTENSION

SOURCE = Path(__file__).parent / "labextension"
SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {"gpusessions.notebook": True}}}


class NotBuilt(RuntimeError):
    pass


def install(prefix: Path) -> list[Path]:
    if not (SOURCE / "package.json").is_file():
        raise NotBuilt(
            f"the lab extension is not built ({SOURCE} is missing): "
            "`pip install -e .` builds it, or `jlpm install && jlpm build` in labextension/"
        )
    lab = prefix / "share" / "jupyter" / "labextensions" / LABEXTENSION
    lab.parent.mkdir(parents=True, exist_ok=True)
    if lab.is_symlink() or lab.is_file():
        lab.unlink()
    elif lab.is_dir():
        for f in sorted(lab.rglob("*"), reverse=True):
            f.rmdir() if f.is_dir() and not f.is_symlink() else f.unlink()
        lab.rmdir()
    lab.symlink_to(SOURCE.resolve(), target_is_directory=True)
    conf = prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "gpusessions.json"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(json.dumps(SERVER_CONFIG, indent=2) + "\n")
    return [lab, conf]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", type=Path, default=Path(sys.prefix), help="environment prefix (sys.prefix)")
    args = p.parse_args(argv)
    try:
        paths = install(args.prefix)
    except NotBuilt as e:
        print(f"gpusessions: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"gpusessions: installed {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
