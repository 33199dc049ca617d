"""Deterministic Temporal workflows: the durable plans of Colony's operations. No IO lives here."""
