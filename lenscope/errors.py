"""The one error boundary of the CLI and the app: which failures the user can act on, and their message."""

from __future__ import annotations

import errno
from pathlib import Path

from lenscope.store.errors import StoreError


def user_message(exc: BaseException) -> str | None:
    """The message for a failure of input, store, model or disk that the user can act on; None for a defect
    (whose traceback belongs in the log, or on the terminal under ``--debug``)."""
    if isinstance(exc, (StoreError, ValueError, FileNotFoundError)):
        return str(exc)
    if isinstance(exc, PermissionError):
        return f"permission denied on {exc.filename or 'a file'}; make it writable for this user or change the path"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        if not exc.filename:
            return "the disk is full; free some space and run it again"
        return (f"the disk holding {Path(exc.filename).parent} is full (writing {exc.filename}); free some space and "
                "run it again")
    return None
