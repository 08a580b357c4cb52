"""``lenscope doctor``: check the store (database, tensor files, orphans) and repair it with ``--fix``."""

from __future__ import annotations

import argparse

from lenscope.cli._common import PhaseBars


def register(subparsers) -> None:
    p = subparsers.add_parser("doctor", help="check the store: database integrity, missing or damaged tensor "
                                             "files, orphans; --fix repairs it")
    p.add_argument("--fix", action="store_true",
                   help="repair: delete damaged, orphan and temporary files and generate damaged runs again")
    p.add_argument("--no-regenerate", action="store_true",
                   help="with --fix, only mark damaged runs (the next collection generates them again)")
    p.set_defaults(func=run_doctor, interrupt_note="interrupted; a check changes nothing, and the repairs --fix "
                   "finished are stored: run it again")


def run_doctor(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.doctor import doctor
    from lenscope.store.errors import store_location
    from lenscope.store.store import Store

    store = Store()
    with PhaseBars() as bars:
        check, done = doctor(store, fix=args.fix, regenerate=not args.no_regenerate, on_progress=bars)
    print(f"store {store_location(store.url)}, tensors in {store.tensors.root}")
    for line in check.lines():
        print(f"  {line}")
    for line in done:
        print(f"  fixed: {line}")
    if check.integrity:
        print("the database itself is damaged: restore lenscope.db from a backup, or move it aside to start a "
              "new store (shipped study generations are imported again by `python -m lenscope study`)")
        return 1
    if check.healthy or (args.fix and check.disk_full is None):
        return 0
    if check.disk_full is None or (check.repairable and not args.fix):  # a full disk's line says what to do
        print("run `python -m lenscope doctor --fix` to repair it")
    return 1
