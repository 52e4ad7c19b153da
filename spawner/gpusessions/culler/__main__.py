"""python -m gpusessions.culler: the `gpusessions` JupyterHub service (settings: app.py)."""

from gpusessions.culler.app import main

if __name__ == "__main__":
    raise SystemExit(main())
