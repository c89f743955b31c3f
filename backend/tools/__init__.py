"""Developer tools run with `python -m backend.tools.<name>`."""
