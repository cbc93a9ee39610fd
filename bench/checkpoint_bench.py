"""Benchmark: what signed checkpoints cost the exporter and ``log verify``.

Run by hand (not a test), from the repository root, no Temporal needed::

    .venv/bin/python bench/checkpoint_bench.py            # 6 rounds
    .venv/bin/python bench/checkpoint_bench.py --rounds 2

1. **Export**: the saved histories (``tests/workflows/histories``) exported offline
   into fresh directories, without and with a signer, rounds interleaved in this
   one process, with a commit after every history event (the worst case of a live
   follower, whose every page is one commit): events per second and the ratio (with /
   without). Signing adds, per commit, one Ed25519 signature and one more atomic file
   write (temp, fsync, rename, fsync directory) after ``head``.
2. **Verify**: ``verify_dir`` of each exported log without and with
   ``verify_checkpoint`` (open the note, check the signature, re-read the log for
   the root at the signed size): events per second and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from observation.exporter import LogWriter, SessionExport, verify_dir
from observation.exporter.checkpoint import verify_checkpoint
from observation.exporter.decode import load_history
from observation.exporter.note import Signer

HISTORIES = Path(__file__).resolve().parents[1] / "tests" / "workflows" / "histories"


def export(sid: str, events: list, runs: Path, signer: Signer | None) -> int:
    """Export a history with one commit per history event; the lines written."""
    with LogWriter(runs / sid, None, signer) as w:
        session = SessionExport(w, sid)
        for event in events:
            session.feed(event, page_end=True)
        return session.finish().written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    hists = [load_history(f.read_text()) for f in sorted(HISTORIES.glob("*.json"))]
    signer = Signer.generate("bench.example")
    verifier = signer.verifier()
    export_s = {False: 0.0, True: 0.0}
    verify_s = {False: 0.0, True: 0.0}
    events = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for signed in ((False, True) if r % 2 == 0 else (True, False)):
                out = Path(tmp) / f"{r}-{signed}"
                t0 = time.perf_counter()
                n = sum(export(sid, evs, out, signer if signed else None) for sid, evs in hists)
                export_s[signed] += time.perf_counter() - t0
                events += n if signed else 0
                t0 = time.perf_counter()
                for sid, _ in hists:
                    v = verify_dir(out / sid)
                    if signed:
                        verify_checkpoint(out / sid, v, verifier)
                verify_s[signed] += time.perf_counter() - t0
                shutil.rmtree(out)
    print(f"{len(hists)} histories x {args.rounds} rounds: {events} events each way")
    for what, s in (("export", export_s), ("verify", verify_s)):
        plain, signed = events / s[False], events / s[True]
        print(f"{what:7} without checkpoints {plain:10,.0f} events/s   with {signed:10,.0f} "
              f"events/s   ratio {signed / plain:.2f}")


if __name__ == "__main__":
    main()
