"""Progress bars: one helper for every bar miaudit shows.

A bar is drawn only when progress is on in three places at once:

- the call's own ``enabled`` argument (the ``progress`` flags that flow through the code);
- the process-wide switch (:func:`set_progress`, :func:`progress_switch`; the command line's
  ``--quiet`` turns it off, which reaches code that has no ``progress`` argument, such as the
  statistics pass, the scorer attacks and the bootstrap);
- stderr is a terminal and this is not a nested worker process (a study's cell worker): logs,
  CI and pipes get no carriage-return noise, and workers do not draw over the parent's bar.

Every bar is ``leave=False`` by default, so the final terminal table is all that remains.
Work that usually finishes in about a second (the statistics pass, the bootstrap, a small
scorer) asks for a ``quick`` bar, which appears only once the work has run ``QUICK_DELAY``
seconds: no flicker of bars nobody can read. Callers update bars per model, epoch, block or
attack, never per sample.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from tqdm import tqdm

# Set (to any value) in processes that are themselves one of many parallel workers, e.g. a
# study's sweep workers: no bars there (and the trainer starts no processes of its own, see
# miaudit.train.parallel). Defined here because this module must stay cheap to import.
NESTED_ENV = "MIAUDIT_NESTED_WORKER"

# Seconds before a ``quick`` bar appears, and between redraws (tqdm's default): read at each
# call, so tests can set them to 0 to see every state of a bar.
QUICK_DELAY = 1.0
MIN_INTERVAL = 0.1

_switch = {"on": True}


def progress_on() -> bool:
    """The process-wide switch (True unless turned off, e.g. by ``--quiet``)."""
    return _switch["on"]


def set_progress(on: bool) -> bool:
    """Turn progress bars on or off for the whole process; returns the previous setting."""
    previous = _switch["on"]
    _switch["on"] = bool(on)
    return previous


@contextlib.contextmanager
def progress_switch(on: bool) -> Iterator[None]:
    """Bars on or off inside the block, the previous setting restored after it."""
    previous = set_progress(on)
    try:
        yield
    finally:
        set_progress(previous)


def quiet() -> contextlib.AbstractContextManager[None]:
    """No progress bars inside the block (``with quiet(): ...``)."""
    return progress_switch(False)


def bars_enabled(enabled: bool = True) -> bool:
    """Whether a bar asked for with ``enabled`` would be drawn (see the module docstring)."""
    if not (enabled and _switch["on"]) or os.environ.get(NESTED_ENV):
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def progress_bar(
    total: int | None,
    desc: str,
    unit: str = "it",
    *,
    enabled: bool = True,
    quick: bool = False,
    leave: bool = False,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar over ``total`` ``unit``s, drawn on stderr only when :func:`bars_enabled`.

    A disabled bar is a real tqdm object that draws nothing, so callers update, close, iterate
    (``iterable=``) and use it as a context manager without checks. ``quick``: hidden until
    the work has taken ``QUICK_DELAY`` seconds. Other keyword arguments go to tqdm.
    """
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        leave=leave,
        delay=QUICK_DELAY if quick else 0.0,
        mininterval=MIN_INTERVAL,
        file=sys.stderr,  # looked up now: tests and callers may have replaced it
        disable=not bars_enabled(enabled),
        dynamic_ncols=True,
        **kwargs,
    )
