"""toolkit.virtual."""
