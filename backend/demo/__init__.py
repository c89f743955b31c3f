"""Demo mode (`headroom serve --demo`): simulated pools whose traffic is ingested through the
real service (`feeder`). Not in `backend/sim/`, which is a pure core without a database."""
