.PHONY: run test lint bench
run:   ## the whole product on one machine (embedded SQLite)
	scripts/run
test:  ## lint, types and every test against the real PostgreSQL and Redis
	scripts/test
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy backend workers && .venv/bin/python -m backend.tools.layers
bench: ## benchmarks; each prints JSON
	for b in ingest predict accuracy training predictor_core schedule schedule_core load console; do .venv/bin/python bench/$$b.py; done
