"""Command-line binaries (absl). The only place besides configurables that uses gin or flags."""
