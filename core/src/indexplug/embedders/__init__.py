"""Embedders shipped with core (registered through the ``indexplug`` entry point group)."""
