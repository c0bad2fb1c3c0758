"""indexplug's benchmark harness (see the package README)."""
