"""The advisor: the best routing config an unchanged llm-d EPP can express for a pool, proven in
simulation on parts of the workload it was not chosen on, before it is applied."""
