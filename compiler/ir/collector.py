"""Python's cyclic garbage collector kept out of the hot paths.

Compiling and simulating a program allocate millions of small objects that live until
the end (commands, timings), so the collector's generation-0 and full passes keep
walking the whole program without finding garbage: on GPT-2 about 1.7 s of a 15 s run.
Inside :func:`paused` it does not run; reference counting still frees everything without
cycles, and what cycles were made are collected when the collector resumes.

A large program (more than :data:`FREEZE_AFTER` objects made inside the pause, about
100k commands) would still be walked by every later full collection, and by the ones
Python runs at exit (three passes of about 1.7 s each for Llama-2-70B's 300k
commands). So on leaving such a pause the young objects are collected once (the
cycles made inside are freed) and everything alive is moved to the collector's
permanent generation (``gc.freeze``): reference counting still frees it when it is
dropped; only cycles among those objects would stay until ``gc.unfreeze()``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

FREEZE_AFTER = 1_000_000
"""Objects made inside a pause past which they are frozen on leaving it."""


@contextlib.contextmanager
def paused(*, exiting: bool = False) -> Iterator[None]:
    """No cyclic collection inside (nested uses are fine; restores the prior state).
    ``exiting``: the process ends right after (a command of the console script), so
    what was made inside is frozen without the collection that would free its cycles
    (on ``archsim run gpt2`` a walk over some 900k objects, torch's included: 0.4-0.9 s)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if exiting:
            gc.freeze()
        elif gc.get_count()[0] > FREEZE_AFTER:
            gc.collect(0)
            gc.freeze()
        gc.enable()
