"""What every hub, notebook server and kernel host imports at start stays cheap: jsonschema's
optional IRI format checker (rfc3987-syntax) compiles a Lark grammar on import, about 1.3 s
of CPU per process start, and is left out of the environment (Makefile, images/)."""

from __future__ import annotations

import subprocess
import sys


def test_a_hub_and_a_jupyter_server_start_without_compiling_the_iri_grammar() -> None:
    code = (
        "import sys, jupyterhub.app, jupyter_server.serverapp, gpusessions.hub.configure; "
        "print(sorted(m for m in sys.modules if m.startswith(('rfc3987_syntax', 'lark'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
