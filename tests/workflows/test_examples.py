"""The example plans in examples/ are valid plan sessions (they are the docs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workflows.config import SessionConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"release-checklist", "long-running-window"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_plan_validates(path: Path):
    plan = yaml.safe_load(path.read_text())
    cfg = SessionConfig.model_validate({"plan": plan})
    assert cfg.plan is not None and cfg.plan.steps
    assert any(s.gate for s in cfg.plan.steps)
