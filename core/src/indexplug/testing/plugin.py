"""pytest plugin entry (pytest11)."""
