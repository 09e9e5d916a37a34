"""Data sources for virtual datasets."""
