# srl-hpc: the two commands a new user types are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SLURM  := scripts/local_slurm.sh
# the local Slurm's ordinary user runs a site-wide install it cannot write, as on a cluster: not editable, so that
# the user needs no access to this checkout (tests/test_slurm_user.py)
USER_VENV := /opt/srl-hpc-user

.PHONY: demo test quick lint install test-install user-install venv slurm-install slurm-up slurm-down slurm-status bench docs clean

demo: install            ## install, then train PPO on CartPole with every worker on this machine
	$(BIN)/srl-launch experiments/cartpole_ppo.yaml

# the Slurm tier beside the other tests (scripts/test_tiers.sh); under SRL_REQUIRE_SLURM=1 a Slurm that did not
# come up stops the Slurm tier instead of skipping it
test: test-install user-install slurm-install  ## install, start the project's local Slurm, run every test, stop Slurm
	bash $(SLURM) start
	PYTEST=$(BIN)/pytest bash scripts/test_tiers.sh; status=$$?; bash $(SLURM) stop; exit $$status

# after each change: the tests that start no run, need no Slurm and are not slow (setup.cfg's markers)
quick: lint test-install  ## ruff, then the tests not marked e2e, slurm or slow (under 2 minutes here)
	$(BIN)/pytest -ra -m "not e2e and not slurm and not slow"

lint: install            ## ruff's checks and format check, the layering check (lint-imports), mypy (settings: pyproject.toml); make quick and CI run it
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

install: $(BIN)/srl-launch

$(BIN)/srl-launch: setup.cfg pyproject.toml constraints.txt | venv
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

test-install: install $(VENV)/.extras

$(VENV)/.extras: setup.cfg constraints.txt   # the optional env backend (env.backend: envpool), multi-agent envs and srl-trace report, so that their tests run too
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,envpool,multiagent,report]'
	touch $@

docs: install $(VENV)/.docs  ## the documentation site (mkdocs.yml) into build/site; strict: a broken link or anchor fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

$(VENV)/.docs: setup.cfg constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[docs]'
	touch $@

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { apt-get update -qq && apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); }

user-install: $(USER_VENV)/.installed  ## the install the local Slurm's ordinary user runs (root)

$(USER_VENV)/.installed: setup.cfg constraints.txt $(shell git ls-files srl_hpc launcher job_templates 2>/dev/null)
	test -x $(USER_VENV)/bin/pip || /usr/bin/python3 -m venv $(USER_VENV) || { apt-get update -qq && \
		apt-get install -y -qq python3-venv && /usr/bin/python3 -m venv $(USER_VENV); }
	$(USER_VENV)/bin/pip install --quiet -c constraints.txt .
	$(USER_VENV)/bin/pip install --quiet --no-deps --force-reinstall .  # this checkout's code, version unchanged
	touch $@

slurm-install:           ## apt: slurm-wlm, munge, OpenMPI (root)
	bash $(SLURM) install

slurm-up: slurm-install    ## start munge, slurmctld and 4 virtual slurmd nodes on this machine
	bash $(SLURM) start

slurm-down:
	bash $(SLURM) stop

slurm-status:
	bash $(SLURM) status

bench: install           ## CartPole throughput for 30 s, as JSON
	$(BIN)/python benchmarks/throughput.py experiments/cartpole_ppo.yaml --seconds 30

clean:
	rm -rf $(VENV) *.egg-info
