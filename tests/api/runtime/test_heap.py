"""Start-up objects are exempt from the collector once a process serves."""

from __future__ import annotations

import subprocess
import sys


def test_freeze_startup_exempts_what_is_alive_and_still_collects_new_garbage() -> None:
    # In a process of its own: freezing the test runner's heap would outlive the test.
    code = """
import gc, weakref
from api.runtime.heap import freeze_startup
import api.http.app  # what a serving process imported
frozen = freeze_startup()
assert frozen == gc.get_freeze_count() > 50_000, frozen
assert gc.get_count()[0] < 100  # collected just before freezing
class Node: pass
a, b = Node(), Node(); a.other, b.other = b, a  # a cycle made after start-up
gone = weakref.ref(a); del a, b
gc.collect()
assert gone() is None  # new garbage is still collected
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
