"""What the CLI shows while a run goes: progress lines, or bars over batches and judgments.

A long LLM run (thousands of judgments at a few per second) looks hung without a sign of
life, so on a terminal the CLI draws tqdm bars on stderr. A bar is only for a person
watching: under ``--quiet`` and when stderr is not a terminal (a log file, CI, a pipe) it is
off, so logs hold no carriage-return debris.

The reporter is process-wide (:func:`current`, set with :func:`using`) because the code that
knows the figures (the judging asset, the run loop) runs inside Dagster's in-process
execution, where the CLI cannot pass an object through run config. In worker processes
(``--workers N``) no reporter is installed: their progress lines go to stderr as before.
No Dagster here: the judge layer and the CLI import this module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO


def show_bars(quiet: bool, stream: TextIO) -> bool:
    """Bars only for a person at a terminal: not under ``--quiet``, not into a file or pipe."""
    if quiet:
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        return False


class Reporter:
    """The default: progress lines to stderr, no bars (the CLI's behaviour without a TTY)."""

    def note(self, text: str) -> None:
        print(text, file=sys.stderr)

    def batches(self, planned: int = 0, done: int = 0) -> None:
        """``planned`` more batches are coming; ``done`` more have finished."""

    def judgment_callback(self) -> Callable[[int, int], None] | None:
        """What the judge runner calls as judgments are planned and finished (deltas:
        ``(done, planned)``), or None when nothing counts them (then the runner does no
        extra work)."""
        return None

    def close(self) -> None:
        """Finish any bars (the summary is printed after them)."""


class QuietReporter(Reporter):
    """``--quiet``: no progress lines, no bars; errors and the summary still print."""

    def note(self, text: str) -> None:
        pass


class BarReporter(Reporter):
    """Two tqdm bars on a terminal: batches (as each Dagster run over them finishes) and
    judgments (as each judge's rows come back, across judges)."""

    def __init__(self, stream: TextIO) -> None:
        from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs pinned

        self._tqdm = tqdm
        self._stream = stream
        self._bars: dict[str, Any] = {}

    def _bar(self, name: str) -> Any:
        if name not in self._bars:
            self._bars[name] = self._tqdm(total=0, desc=name, unit=name.rstrip("s"),
                                          file=self._stream, position=len(self._bars),
                                          leave=True, dynamic_ncols=True)
        return self._bars[name]

    def _advance(self, name: str, done: int, planned: int) -> None:
        bar = self._bar(name)
        if planned:
            bar.total = (bar.total or 0) + planned
            bar.refresh()
        if done:
            bar.update(done)

    def note(self, text: str) -> None:
        self._tqdm.write(text, file=self._stream)

    def batches(self, planned: int = 0, done: int = 0) -> None:
        self._advance("batches", done, planned)

    def judgment_callback(self) -> Callable[[int, int], None] | None:
        return lambda done, planned: self._advance("judgments", done, planned)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def reporter_for(quiet: bool, stream: TextIO | None = None) -> Reporter:
    """Bars on a terminal, nothing under ``--quiet``, else the plain progress lines."""
    stream = sys.stderr if stream is None else stream
    if show_bars(quiet, stream):
        return BarReporter(stream)
    return QuietReporter() if quiet else Reporter()


_current: Reporter = Reporter()


def current() -> Reporter:
    return _current


@contextmanager
def using(reporter: Reporter) -> Iterator[Reporter]:
    """Install ``reporter`` for the duration of a run; its bars are closed at the end."""
    global _current
    before, _current = _current, reporter
    try:
        yield reporter
    finally:
        _current = before
        reporter.close()
