"""Which key signs the checkpoints (``observation.exporter.checkpoint``).

``HITLFLOW_CHECKPOINT_KEY`` (the operator's, e.g. on a cluster): a file holding a
signer key (``hitlflow log keygen`` writes one), or the key text itself
(``PRIVATE+KEY+...``). Unset: ``<data_dir>/checkpoint.key``, created (mode 0600)
by the exporter's first start.
"""

from __future__ import annotations

from pathlib import Path

from api.settings import HitlflowSettings
from observation.exporter.keys import KEY_NAME, VERIFIER_NAME, load_or_create_signer, read_signer
from observation.exporter.note import PRIVATE_PREFIX, NoteKeyError, Signer, Verifier


def exporter_signer(settings: HitlflowSettings, *, create: bool = True) -> Signer | None:
    """The exporter's signer: the operator's key, else the data directory's (created
    there if ``create``; None if not and there is none). :class:`NoteKeyError` on a
    key that cannot be read."""
    given = (settings.checkpoint_key or "").strip()
    if given.startswith(PRIVATE_PREFIX):
        return Signer.parse(given)
    if given:
        return read_signer(Path(given))
    if create:
        return load_or_create_signer(settings.data_dir)
    path = settings.data_dir / KEY_NAME
    return read_signer(path) if path.exists() else None


def verifier_key(settings: HitlflowSettings) -> Verifier:
    """The verifier key of the exporter's signer, else the one it published
    (``<data_dir>/checkpoint.pub``); :class:`NoteKeyError` when there is none."""
    signer = exporter_signer(settings, create=False)
    if signer is not None:
        return signer.verifier()
    published = settings.data_dir / VERIFIER_NAME
    try:
        return Verifier.parse(published.read_text())
    except FileNotFoundError:
        raise NoteKeyError(f"no checkpoint key in {settings.data_dir} yet: the exporter "
                           "creates one when it first starts (`hitlflow up`), or set "
                           "HITLFLOW_CHECKPOINT_KEY") from None
    except (OSError, UnicodeDecodeError, NoteKeyError) as err:
        raise NoteKeyError(f"{published}: {err}") from None
