"""Read-only: projections, the history exporter, log replay and verification."""
