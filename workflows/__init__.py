"""Deterministic code only: transition tables, pure decisions, workflow classes.

Comments cite the design by "seed 000" to "seed 004": docs/concepts.md says what each
requires and docs/glossary.md maps its names to the code's.
"""
