"""The ways in: the HTTP service (``api/http``), the command line (``api/cli``) and the
runtime that wires the worker and its processes (``api/runtime``).

Comments cite the design by "seed 000" to "seed 004": docs/concepts.md says what each
requires and docs/glossary.md maps its names to the code's.
"""
