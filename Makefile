.PHONY: run test bench lint

run:  ## venv, migrations, local secrets, then the server (API :8080, admin UI :8081)
	scripts/run.sh

test:  ## install everything the tests need, then the whole suite (SQLite and PostgreSQL)
	scripts/test.sh

bench:  ## the core HTTP and in-process benchmark
	scripts/bootstrap.sh && .venv/bin/python bench/core_bench.py

lint:
	.venv/bin/ruff check forqapp project tests bench
