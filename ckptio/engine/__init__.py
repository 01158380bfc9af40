"""The engine: one write protocol, one commit protocol, the two-phase restart, verification (issue 24)."""
