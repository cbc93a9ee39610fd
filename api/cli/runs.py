"""A session's run directory (``<data_dir>/runs/<session id>/``) as the ``log``
commands take it: by the session's id, or by its path."""

from __future__ import annotations

from pathlib import Path

import typer


def run_dir(target: str, data_dir: Path | None) -> Path:
    """A run directory from a session id or a path."""
    from api.settings import HitlflowSettings
    from workflows.config import valid_session_id

    path = Path(target)
    if path.is_dir():
        return path
    if valid_session_id(target):
        settings = HitlflowSettings(**({"data_dir": data_dir} if data_dir is not None else {}))
        found = settings.data_dir / "runs" / target
        if found.is_dir():
            return found
        raise typer.BadParameter(f"no log for session {target} under {found.parent}")
    raise typer.BadParameter(f"{target} is neither a session id nor a directory")
