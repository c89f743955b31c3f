"""The web console: server-rendered pages over the domains' services (see app.py)."""
