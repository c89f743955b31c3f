"""What-if: an edited policy simulated against the active one on a shipped trace, before it is
saved. `jobs` (records and their stores), `simulation` (the two runs and their comparison),
`runner` (starts a job in a thread or as a Celery task, and runs it)."""
