"""Numba reducers for pyramids (pure, nogil, cached)."""
