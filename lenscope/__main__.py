"""Entry point for ``python -m lenscope``."""

from lenscope.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
