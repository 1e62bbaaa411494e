"""Built-in scenario files, one per story."""
