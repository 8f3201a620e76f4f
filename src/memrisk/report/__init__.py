"""Aggregates and reports built from stored records."""
