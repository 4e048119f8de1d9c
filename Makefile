# One command per job. Everything a target needs, it installs or builds itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# What mypy checks: the library packages, and ConfigMirror's package (its own distribution,
# configmirror/pyproject.toml, src layout, installed editable next to the library for the
# demo and tests).
PACKAGES := kubemoon_core kubemoon_io kubemoon_trio kubemoon_asyncio kubemoon_sync kubemoon_testing kubemoon_cli configmirror/src/configmirror
CORE_COVERAGE_MIN := 95
# The version tier runs in `make test` unless set empty (VERSION_TIER=).
VERSION_TIER ?= 1
# ConfigMirror's two versions (v1beta1 stored) and its conversion webhook's Service.
CONFIGMIRROR_CRD := configmirror._api:ConfigMirror configmirror._api:ConfigMirrorV1beta1 \
	--webhook-service kubemoon-system/configmirror-webhook:443/convert-configmirror
CONFIGMIRROR_RBAC_ACCOUNT := --service-account kubemoon-system/configmirror --name kubemoon-configmirror
CONFIGMIRROR_RBAC := configmirror._operator:rbac_manager $(CONFIGMIRROR_RBAC_ACCOUNT)
# ConfigMirror's webhook configurations for cert-manager, generated from its declarations.
CONFIGMIRROR_WEBHOOKS := configmirror:webhook_declarations \
	--service kubemoon-system/configmirror-webhook \
	--inject-ca-from kubemoon-system/configmirror-webhook

.PHONY: all install lint typecheck test test-fast test-matrix unit property fault integration docs fuzz bench testenv testenv-newest test-versions demo dist clean

all: test

$(STAMP): pyproject.toml configmirror/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]' -e ./configmirror
	@touch $(STAMP)

install: $(STAMP)

# actionlint (the GitHub workflows' linter), from the Go module proxy into .venv/bin.
ACTIONLINT := github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
$(BIN)/actionlint: | $(STAMP)
	GOBIN=$(abspath $(BIN)) GOFLAGS=-mod=mod go install $(ACTIONLINT)

lint: $(STAMP) $(BIN)/actionlint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/unasync.py --check
	$(BIN)/python scripts/migrate_imports.py --check .  # no import of a moved name by its old path
	$(BIN)/python scripts/gen_builtins.py --check
	$(BIN)/python scripts/state_diagrams.py --check  # docs/diagrams/*.mmd are the machines' tables
	$(BIN)/kubemoon crd check deploy/base/crd.yaml $(CONFIGMIRROR_CRD)
	$(BIN)/python scripts/version.py check
	$(BIN)/actionlint -no-color
	# The cert-manager overlay's webhook configurations, CRD conversion patch and RBAC, one
	# command; the CRD itself is the base's (checked above).
	$(BIN)/kubemoon manifests $(CONFIGMIRROR_RBAC) --webhooks $(CONFIGMIRROR_WEBHOOKS) \
		--out deploy/overlays/cert-manager --check
	$(BIN)/kubemoon rbac check deploy/overlays/self-managed/rbac.yaml \
		configmirror._operator:rbac_manager_self_managed $(CONFIGMIRROR_RBAC_ACCOUNT)
	PYTHONPATH=examples/widgets $(BIN)/kubemoon manifests examples/widgets/controller.py:rbac_manager \
		--crd examples/widgets/widget_api.py:Widget \
		--service-account widgets-system/widgets --name widgets --out examples/widgets --check
	$(BIN)/kubemoon manifests examples/teamspace/operator.py:manager \
		--crd examples/teamspace/operator.py:TeamSpace \
		--service-account teamspaces-system/teamspaces --name teamspaces --out examples/teamspace --check

typecheck: $(STAMP)
	$(BIN)/mypy --strict $(PACKAGES)
	$(BIN)/basedpyright --pythonpath $(BIN)/python  # the examples, pyright basic ([tool.basedpyright])

# The real kube-apiserver, etcd and kube-controller-manager, cached outside the clone:
# kube-apiserver and etcd from controller-tools' envtest release archive of that version
# when there is one (SHA-512 checked), the rest built with Go (kubemoon-testenv ships with
# kubemoon_testing).
# `make testenv` gets every supported release (kubemoon_testing.SUPPORTED_RELEASES, cached
# per version) and checks that their shipped Go modules are what the list renders;
# `make test` needs only the newest (testenv-newest), then runs the version tier on the
# older releases that are present, in full (about 15 minutes each on a quiet machine; docs/support.rst
# has the figures); `make test VERSION_TIER=` leaves it out.
testenv: $(STAMP)
	$(BIN)/kubemoon-testenv build --version all
	$(BIN)/kubemoon-testenv module --check

testenv-newest: $(STAMP)
	$(BIN)/kubemoon-testenv build

# Every tier: unit, property, fault, integration (real apiserver), end to end, the docs,
# and the release artefacts (make dist; a test installs the wheels into a clean venv).
test: lint typecheck testenv-newest dist
	@rm -f .coverage .coverage.*
	$(BIN)/coverage run -m pytest -q tests
	@echo "== branch coverage of kubemoon_core =="
	$(BIN)/coverage report --fail-under=$(CORE_COVERAGE_MIN)
	@if [ -n "$(VERSION_TIER)" ]; then $(MAKE) --no-print-directory test-versions; \
	else echo "== version tier left out (VERSION_TIER is empty); make test-versions runs it =="; fi
	@$(MAKE) --no-print-directory docs

# The version tier: the integration and end-to-end tiers, in full, on each older supported
# release whose binaries are built (VERSIONS_ALL= runs the quicker subset of
# scripts/test_versions.py); the newest runs the full suite above.
VERSIONS_ALL ?= 1
test-versions: $(STAMP) testenv-newest
	$(BIN)/python scripts/test_versions.py $(if $(VERSIONS_ALL),--all)

# The everyday loop: the pure tiers only, in seconds.
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit tests/property

# The pure tiers on every supported CPython found here (3.11, 3.12, 3.13), each in its own
# .venv-3.X; a version that is not installed is skipped with a message.
test-matrix:
	$(PYTHON) scripts/test_matrix.py $(MATRIX)

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

property: $(STAMP)
	$(BIN)/pytest -q tests/property

fault: $(STAMP)
	$(BIN)/pytest -q tests/fault

integration: $(STAMP) testenv-newest
	$(BIN)/pytest -q tests/integration

docs: $(STAMP)
	$(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html

# The same property suites, run much longer.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q fuzz

# Benchmark-only dependencies are installed here, never by make test. The controller-runtime
# ConfigMirror (bench/controller_runtime, its own Go module) is vetted here and built by
# bench_operator, with the machine's Go (modules and build cache outside the clone).
bench: $(STAMP) testenv-newest
	$(BIN)/python -m pip install -q $(foreach f,$(wildcard bench/requirements*.txt),-r $(f))
	@if command -v go >/dev/null; then cd bench/controller_runtime && go vet ./...; \
	else echo "go not found: bench_operator's controller-runtime rows will say so"; fi
	cd bench && ../$(BIN)/python run.py

# The demo needs no controller manager: build (once) and start only the apiserver and etcd.
demo: $(STAMP)
	$(BIN)/kubemoon-testenv build --only kube-apiserver,etcd
	$(BIN)/python examples/demo.py

# The sdist and wheel of both distributions (the library, then ConfigMirror) into dist/,
# built in .venv without network (setuptools is in the dev extra), then `twine check`.
dist: $(STAMP)
	$(BIN)/python scripts/version.py check
	rm -rf dist build configmirror/build
	$(BIN)/python -m build --no-isolation --outdir dist .
	$(BIN)/python -m build --no-isolation --outdir dist configmirror
	rm -rf build configmirror/build
	$(BIN)/twine check --strict dist/*

clean:
	rm -rf $(VENV) .venv-3.* .coverage docs/_build .mypy_cache .ruff_cache .hypothesis dist
