# The two commands a new user needs: `make demo` (main job on the embedded default) and `make test`.
# Both create or reuse the virtual environment at .venv (scripts/venv.sh).
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo test test-unit bench-quick docs docs-build

venv:
	@bash scripts/venv.sh test

# DEMO_ARGS: scripts/demo.py's options, e.g. DEMO_ARGS="--scenes 60 --steps 6" (tests/ray/test_readme_run.py)
demo: venv
	$(PY) scripts/demo.py $(DEMO_ARGS)

test: venv
	@bash scripts/system_deps.sh
	$(PY) -m pytest -q

test-unit: venv
	$(PY) -m pytest -q tests/unit

bench-quick: venv
	@for b in $$(ls benchmarks/*.py | xargs -n1 basename | grep -v '^_' | sed 's/\.py$$//'); do \
	  $(PY) -m benchmarks.$$b --quick --out runs/bench/$$b.json || exit 1; done

# The documentation site (mkdocs.yml): `make docs` serves it at http://127.0.0.1:8001 and rebuilds on
# save; `make docs-build` is the strict build CI runs through tests/unit/test_docs.py. The two
# variables silence the theme's and a plugin's banners about MkDocs 2, which are not build warnings.
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
DOCS_ADDR ?= 127.0.0.1:8001

docs: venv
	$(DOCS_ENV) $(PY) -m mkdocs serve --dev-addr $(DOCS_ADDR)

docs-build: venv
	$(DOCS_ENV) $(PY) -m mkdocs build --strict
