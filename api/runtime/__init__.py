"""The composition root: builds the worker, its process, the dev server, the signing
keys, and wires workflows, activities and observation together."""
