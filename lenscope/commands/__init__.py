"""CLI sub-commands; every module here exposes ``register(subparsers)``."""
