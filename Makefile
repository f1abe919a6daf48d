# the-loop: two entry points, `make run` and `make test`. Both create or refresh .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MERMAID := $(VENV)/mermaid
OPENAPI := $(VENV)/github-openapi
GQLSCHEMA := $(VENV)/github-graphql-schema
AXE     := $(VENV)/axe
AGENTS  := $(VENV)/agents

.PHONY: run test lint venv clean bench system

venv: $(STAMP) $(MERMAID)/.installed $(OPENAPI)/.installed $(GQLSCHEMA)/.installed $(AXE)/.installed $(AGENTS)/.installed

# Reinstall whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Mermaid's parser for lint-artifacts (diagrams: true): pinned npm packages, no install scripts.
$(MERMAID)/.installed: tools/mermaid/package.json tools/mermaid/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(MERMAID)
	cp tools/mermaid/package.json tools/mermaid/package-lock.json tools/mermaid/.npmrc $(MERMAID)/
	cd $(MERMAID) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# GitHub's published OpenAPI description (@octokit/openapi, pinned): the sandbox's REST
# answers are checked against it (tests/integrations/test_sandbox_openapi.py).
$(OPENAPI)/.installed: tools/github-openapi/package.json tools/github-openapi/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(OPENAPI)
	cp tools/github-openapi/package.json tools/github-openapi/package-lock.json tools/github-openapi/.npmrc $(OPENAPI)/
	cd $(OPENAPI) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error

# GitHub's published GraphQL schema (@octokit/graphql-schema, pinned): the mutations the-loop
# sends and the sandbox serves are checked against it (tests/integrations/test_sandbox_graphql.py).
$(GQLSCHEMA)/.installed: tools/github-graphql-schema/package.json tools/github-graphql-schema/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(GQLSCHEMA)
	cp tools/github-graphql-schema/package.json tools/github-graphql-schema/package-lock.json tools/github-graphql-schema/.npmrc $(GQLSCHEMA)/
	cd $(GQLSCHEMA) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# axe-core for the dashboard's accessibility check in Chromium (tests/web/test_browser.py);
# the dashboard itself draws its graphs with the Mermaid installed above (mermaid.min.js).
$(AXE)/.installed: tools/axe/package.json tools/axe/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(AXE)
	cp tools/axe/package.json tools/axe/package-lock.json tools/axe/.npmrc $(AXE)/
	cd $(AXE) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# The harness CLIs at the Dockerfile's pins, for the contract tests (tests/contract/).
# claude-code >= 2.1.198 declares Node >= 22 but ships its native binary in a platform
# package: npm ci --ignore-scripts, then its install.cjs copies that binary over
# bin/claude.exe (nothing is downloaded); the binary runs under Node 20 as well.
$(AGENTS)/.installed: tools/agents/package.json tools/agents/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 with npm (Debian: apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(AGENTS)
	cp tools/agents/package.json tools/agents/package-lock.json tools/agents/.npmrc $(AGENTS)/
	cd $(AGENTS) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error --engine-strict=false
	cd $(AGENTS) && node node_modules/@anthropic-ai/claude-code/install.cjs
	HOME=$$(mktemp -d) $(AGENTS)/node_modules/.bin/claude --version | grep -qF "$$(node -p 'require("./tools/agents/package.json").dependencies["@anthropic-ai/claude-code"]')"
	HOME=$$(mktemp -d) $(AGENTS)/node_modules/.bin/codex --version | grep -qF "$$(node -p 'require("./tools/agents/package.json").dependencies["@openai/codex"]')"
	touch $@

# What the tests use beyond the venv, from Debian's packages: Chromium and its ChromeDriver
# (the dashboard's browser tests) and tmux (the harness's tmux mode). Installed with apt
# when missing and run as root; otherwise one line names the command, before any test.
SYSTEM_PACKAGES := chromium chromium-driver tmux
system:
	@missing=""; \
	for cmd in chromium chromedriver tmux; do command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$cmd"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's $(SYSTEM_PACKAGES) (missing:$$missing)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	  else \
	    echo "the tests need$$missing: run 'sudo apt-get install -y $(SYSTEM_PACKAGES)', then make test"; exit 1; \
	  fi; \
	fi

run: venv
	./scripts/dev-run.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy graph foundation integrations webhook workers runner the_loop

test: venv system lint
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-output
