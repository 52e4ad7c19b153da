"""Run every benchmark (tests/bench/bench_*.py) with its default arguments: `make bench`.

    .venv/bin/python tests/bench/run_all.py [--only picker,culler] [--skip spawn]

Each benchmark runs in its own process with `--json <file>` (a benchmark
whose source does not mention `--json` runs without it, and the last line of
its output that is a JSON object is taken instead). Its result goes into
docs/benchmarks.json under the benchmark's name (bench_<name>.py), as
{"command", "date", "figures"}; entries of benchmarks not run are kept. The
table between the `bench-runs` markers in docs/benchmarks.md is rewritten
from docs/benchmarks.json: every benchmark's exact command and the date of
its last run. The prose and tables of each section stay the authors' job.
A failing benchmark is reported and the others still run; the exit status
is non-zero if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
JSON_PATH = ROOT / "docs" / "benchmarks.json"
MD_PATH = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- bench-runs: written by tests/bench/run_all.py (make bench); do not edit by hand -->"
END = "<!-- /bench-runs -->"


def benchmarks() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def normalise(name: str, path: Path, doc: dict[str, Any], wall: float) -> dict[str, Any]:
    """{"command", "date", "figures"} whatever shape the benchmark wrote."""
    command = str(doc.get("command") or f"tests/bench/{path.name}")
    if not command.startswith(".venv/bin/python"):
        command = f".venv/bin/python {command}"
    figures = doc.get("figures")
    if not isinstance(figures, dict):
        figures = {k: v for k, v in doc.items() if k not in ("command", "date")}
    return {
        "command": command,
        "date": str(doc.get("date") or time.strftime("%Y-%m-%d")),
        "wall_s": round(wall, 1),
        "figures": figures,
    }


def run_one(name: str, path: Path) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        out = Path(tmp) / "result.json"
        takes_json = "--json" in path.read_text()
        cmd = [sys.executable, str(path), *(["--json", str(out)] if takes_json else [])]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
        rc = proc.wait()
        wall = time.monotonic() - t0
        if rc != 0:
            print(f"== {name}: FAILED (exit {rc}) after {wall:.0f}s", flush=True)
            return None
        doc = json.loads(out.read_text()) if out.exists() else last_json_line("".join(lines))
        if doc is None:
            print(f"== {name}: wrote no JSON result; not recorded", flush=True)
            return None
        print(f"== {name}: done in {wall:.0f}s", flush=True)
        return normalise(name, path, doc, wall)


def runs_table(results: dict[str, Any]) -> str:
    rows = [
        BEGIN,
        "",
        "| benchmark | command | last run | figures |",
        "|---|---|---|---|",
    ]
    for name in sorted(results):
        r = results[name]
        rows.append(f"| {name} | `{r['command']}` | {r['date']} | `docs/benchmarks.json` `{name}` |")
    rows += ["", END]
    return "\n".join(rows)


def update_markdown(results: dict[str, Any], md: Path = MD_PATH) -> None:
    text = md.read_text()
    table = runs_table(results)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + table + rest.split(END, 1)[1]
    else:  # after the introduction, before the first section
        cut = text.find("\n## ")
        cut = len(text) if cut < 0 else cut + 1
        text = text[:cut] + table + "\n\n" + text[cut:]
    md.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated names (bench_<name>.py)")
    ap.add_argument("--skip", default="", help="comma-separated names")
    args = ap.parse_args()
    found = benchmarks()
    only = [n for n in args.only.split(",") if n]
    skip = {n for n in args.skip.split(",") if n}
    unknown = (set(only) | skip) - set(found)
    if unknown:
        raise SystemExit(f"unknown benchmarks {sorted(unknown)} (known: {', '.join(found)})")
    names = [n for n in (only or found) if n not in skip]
    failed = []
    for name in names:
        r = run_one(name, found[name])
        if r is None:
            failed.append(name)
            continue
        # Read again: keep what another run wrote meanwhile.
        results: dict[str, Any] = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}
        results[name] = r
        JSON_PATH.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        update_markdown(results)
    print(
        f"== benchmarks run: {len(names) - len(failed)} of {len(names)}; "
        f"results in {JSON_PATH.relative_to(ROOT)}"
    )
    if failed:
        print(f"== failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
