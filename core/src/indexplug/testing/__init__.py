"""The conformance kit (see indexplug.testing.kit)."""
