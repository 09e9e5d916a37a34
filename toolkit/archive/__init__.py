"""toolkit.archive."""
