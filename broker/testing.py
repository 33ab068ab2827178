"""pytest plugin: fixtures that run a real broker (filled in below)."""
