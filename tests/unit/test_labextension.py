"""The JupyterLab extension (labextension/, TypeScript): its jest tests pass, it is packaged where
JupyterLab finds it, and the install helper links the build into an environment.

`jlpm test` runs the extension's jest tests (src/__tests__: the status bar's words, the event
stream's parser, the side panel's DOM, Keep's and Release's outcomes). A failed jest run fails
this test; a missing jlpm or Node.js fails it too (make venv installs both)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpusessions.notebook import LABEXTENSION, _jupyter_labextension_paths, install

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "labextension"
PACKAGE = json.loads((EXT / "package.json").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUILT = ROOT / "spawner" / "gpusessions" / "notebook" / "labextension"
JLPM = Path(sys.executable).parent / "jlpm"


def _jlpm(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    assert JLPM.exists(), "jlpm is missing from .venv (jupyter-builder, with jupyterlab: make venv)"
    assert shutil.which("node"), "Node.js is missing (make venv installs it: ensure-debian-deps.sh node)"
    env = {**os.environ, "PATH": f"{JLPM.parent}{os.pathsep}{os.environ.get('PATH', '')}", "CI": "true"}
    return subprocess.run(
        [str(JLPM), *args], cwd=EXT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_jest() -> None:
    if not (EXT / "node_modules" / ".bin" / "jest").exists():
        r = _jlpm("install", "--immutable", timeout=600)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    r = _jlpm("test", timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]
    m = re.search(r"^Tests:\s+(\d+) passed, (\d+) total", out, re.M)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 0, out[-4000:]


def test_package_names_and_versions_agree() -> None:
    assert PACKAGE["name"] == LABEXTENSION == "@gpusessions/notices"
    assert PACKAGE["version"] == PYPROJECT["project"]["version"]


def test_the_build_goes_where_the_package_says() -> None:
    """jupyter-builder writes to package.json's outputDir: the folder that
    `_jupyter_labextension_paths`, the install helper and the wheel's shared-data name."""
    out = (EXT / PACKAGE["jupyterlab"]["outputDir"]).resolve()
    assert out == BUILT
    (paths,) = _jupyter_labextension_paths()
    assert (ROOT / "spawner" / "gpusessions" / "notebook" / paths["src"]).resolve() == BUILT
    assert paths["dest"] == LABEXTENSION
    assert install.SOURCE.resolve() == BUILT
    rel = BUILT.relative_to(ROOT).as_posix()
    shared = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared[rel] == f"share/jupyter/labextensions/{LABEXTENSION}"
    assert shared["jupyter-config/gpusessions.json"] == "etc/jupyter/jupyter_server_config.d/gpusessions.json"
    hook = PYPROJECT["tool"]["hatch"]["build"]["hooks"]["jupyter-builder"]
    assert f"{rel}/package.json" in hook["ensured-targets"]
    for kwargs in ("build-kwargs", "editable-build-kwargs"):
        assert hook[kwargs]["path"] == "labextension"
        assert hook[kwargs]["build_cmd"] in PACKAGE["scripts"]
    assert hook["editable-build-kwargs"]["build_dir"] == rel


def test_built_output_is_not_committed() -> None:
    r = subprocess.run(
        [
            "git",
            "ls-files",
            "spawner/gpusessions/notebook/labextension",
            "labextension/lib",
            "labextension/node_modules",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, f"git ls-files failed (the tests run from a git checkout): {r.stderr}"
    assert r.stdout == ""
    r = subprocess.run(["git", "check-ignore", "-q", f"{BUILT.relative_to(ROOT)}/package.json"], cwd=ROOT)
    assert r.returncode == 0


@pytest.mark.parametrize("image", ["holder", "hub", "singleuser-gpu"])
def test_images_build_the_extension(image: str) -> None:
    """The wheel stage has Node.js and every source the package build reads."""
    text = (ROOT / "images" / image / "Dockerfile").read_text()
    wheel = text[text.index(" AS wheel") : text.index("\nFROM ", text.index(" AS wheel"))]
    assert "COPY --from=node /usr/local/bin/node" in wheel
    for src in ("labextension/", "jupyter-config/", "spawner/"):
        assert f"COPY {src} {src}" in wheel, (image, src)


def test_install_links_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = tmp_path / "built"
    (built / "static").mkdir(parents=True)
    (built / "package.json").write_text('{"name": "@gpusessions/notices"}')
    monkeypatch.setattr(install, "SOURCE", built)
    prefix = tmp_path / "env"
    # A copy from an editable install's shared-data is replaced by the link.
    copy = prefix / "share" / "jupyter" / "labextensions" / "@gpusessions" / "notices"
    (copy / "static").mkdir(parents=True)
    (copy / "static" / "old.js").write_text("")
    lab, conf = install.install(prefix)
    assert lab == copy and lab.is_symlink() and lab.resolve() == built.resolve()
    assert json.loads(conf.read_text()) == install.SERVER_CONFIG
    assert install.install(prefix) == [lab, conf]  # again: the link is replaced


def test_install_says_when_the_extension_is_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(install, "SOURCE", tmp_path / "missing")
    assert install.main(["--prefix", str(tmp_path / "env")]) == 1
    assert "pip install -e" in capsys.readouterr().err
    assert not (tmp_path / "env" / "share").exists()
