"""What several commands share: the sub-command parser, the stderr console, progress bars, the flags
that take keyword arguments (``--env-args``, ``--model-args``).

Rich and YAML are imported inside the functions, so that building the parser (every ``ludus`` call,
``--help`` included) stays as cheap as argparse itself.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

MODEL_ARGS_HELP = (
    "options for loading the model, a YAML or JSON mapping: for tiny its shape (e.g. '{max_len: 1024}'), for hf: "
    "device, dtype, tool_format; for a server timeout_s, concurrency, tool_format"
)
ENV_ARGS_HELP = "keyword arguments for the environment, a YAML or JSON mapping, e.g. '{digits: 3}'"


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser that can add some arguments only when that sub-command is parsed:
    ``ludus train``'s config-field flags come from ``ludus.train.config``, which ``ludus --help``
    and the other commands need not import."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: list[Callable[[argparse.ArgumentParser], None]] = []

    def defer(self, add_arguments: Callable[[argparse.ArgumentParser], None]) -> None:
        self._deferred.append(add_arguments)

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        while self._deferred:
            self._deferred.pop(0)(self)
        return super().parse_known_args(args, namespace)


def fewer_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas for a long run with many threads (environment threads, the engine):
    each thread that allocates may get an arena of its own, which it keeps; a 40-step nim training
    peaked at 2.2 GB resident by default and 1.3 GB with two arenas, in the same time
    (benchmarks/README.md). Call before threads start; a no-op where the C library is not glibc or
    the user set ``MALLOC_ARENA_MAX``."""
    import ctypes
    import ctypes.util
    import os
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or "MALLOC_ARENA_MAX" in os.environ:
        return
    m_arena_max = -8  # glibc's malloc.h
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(m_arena_max, arenas)


@functools.cache
def console() -> Console:
    """The console for progress, notes and errors: stderr, so that stdout carries only results."""
    from rich.console import Console

    return Console(stderr=True)


def progress_bar(label: str) -> Progress:
    """A bar with the command's label, done/total, elapsed time and a free-text description."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(f"[bold blue]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console(),
    )


def mapping_flag(flag: str, text: str | None) -> dict[str, Any]:
    """The value of a flag that takes keyword arguments (``--env-args``, ``--model-args``, ``ludus
    train``'s ``--tiny``): a YAML mapping, of which JSON is a subset, read the same way by every
    command. JSON is read as JSON first, so that its numbers stay numbers (YAML reads ``1e-3``
    as text)."""
    if not text:
        return {}
    import yaml

    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ValueError(
                f"{flag} must be a mapping such as '{{digits: 3}}' (YAML or JSON); {text!r} does not parse: {problem}"
            ) from None
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"{flag} must be a mapping of names to values such as '{{digits: 3}}', got {text!r}")
    return value


def add_browser_flags(p: argparse.ArgumentParser) -> None:
    """``--allow-origin`` and ``--allow-host``: what a server answers of browser pages
    (``ludus.serve.browser``), the same for ``serve-env`` and ``serve-model``."""
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="serve browser pages of this origin, written as browsers send it (scheme://host[:port], lower case, "
        "no default port; repeatable); requests from any other page are refused",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests addressed to this DNS name (repeatable); by default only IP addresses and localhost "
        "are, so that no web page can reach the server through a name it points at this machine (DNS rebinding)",
    )


def add_token_flags(p: argparse.ArgumentParser, variable: str, when: str) -> None:
    """``--token-file`` and ``--token``: the bearer token a server requires (``serve-env``, ``proxy``),
    else ``$variable``; ``when`` says when one is needed."""
    token = p.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        help=f"require 'Authorization: Bearer TOKEN', TOKEN read from this file (default: ${variable}; "
        f"{when}; 16 characters at least)",
    )
    token.add_argument("--token", help="as --token-file, but visible to other users of this machine (ps)")


def read_token(args: argparse.Namespace, variable: str, warn: Callable[[str], None]) -> str | None:
    """The token ``add_token_flags`` asked for: from ``--token-file``, ``--token`` (with a warning:
    ``ps`` shows it) or ``$variable``; None if none is set."""
    import os

    if args.token_file:
        with open(args.token_file, encoding="utf-8") as file:
            token = file.read().strip() or None
        if token is None:
            raise ValueError(f"--token-file {args.token_file} is empty")
        return token
    if args.token:
        warn(f"--token is visible to other users of this machine (ps): use --token-file or ${variable}")
    return args.token or os.environ.get(variable) or None


def add_env_server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-server",
        action="append",
        metavar="URL",
        help="play on an env server started with `ludus serve-env` (repeat for several: sessions are spread "
        "over them); the token, if the server needs one, comes from $LUDUS_ENV_TOKEN",
    )
