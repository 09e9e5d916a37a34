"""toolkit.pyramid."""
