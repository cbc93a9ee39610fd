"""Deterministic code only: transition tables, pure decisions, workflow classes."""
