"""The heap of a long-running process (``up``, ``worker``, ``api``, ``exporter``).

What a process imported and built before it serves (the SDK, FastAPI, pydantic's
schemas, the workflow module: some 200,000 objects) is never garbage, yet every
full collection of the cyclic garbage collector walks all of it again: about
0.1 s with the whole loop stopped, which is a request's p99 (and more of them as
the number of sessions a process holds makes full collections more frequent).
Entry points call :func:`freeze_startup` once they serve: a last collection,
then what survived moves to the permanent generation, which collections skip.
"""

from __future__ import annotations

import gc


def freeze_startup() -> int:
    """Collect once, then exempt every object alive now from later collections;
    returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
