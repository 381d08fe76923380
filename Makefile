.PHONY: run test bench lint docs rehearsal

run:  ## venv (requirements.txt only), migrations, local secrets, then the server (API :8080, admin UI :8081)
	scripts/run.sh

test:  ## install what the tests need (requirements-dev.txt), ruff, mypy, migrations check, the suite (SQLite, Django 6, PostgreSQL): every phase runs, one summary at the end
	scripts/test.sh

bench:  ## the core HTTP and in-process benchmark
	scripts/bootstrap.sh && .venv/bin/python bench/core_bench.py

rehearsal:  ## the network rehearsal (root): API, worker and PostgreSQL hosts in network namespaces, faults under load (scripts/rehearsal.sh; ARGS="--scaling" etc.)
	scripts/rehearsal.sh $(ARGS)

lint:  ## ruff and mypy (installs requirements-dev.txt first)
	scripts/bootstrap.sh requirements-dev.txt
	.venv/bin/ruff check .
	.venv/bin/mypy forqapp

docs:  ## the docs site on http://127.0.0.1:8000, rebuilt as you edit (installs requirements-dev.txt first)
	scripts/bootstrap.sh requirements-dev.txt
	.venv/bin/mkdocs serve
