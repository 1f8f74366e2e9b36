"""Exits 0 having done nothing at all."""
