"""The smallest complete indexplug backend (a template to copy)."""
