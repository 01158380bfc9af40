"""Tiers above the engine: async, staging, the staged reader, catalog and retention, leases,
batch-system signals (issue 24)."""
