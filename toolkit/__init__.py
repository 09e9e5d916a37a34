"""toolkit."""
