# make demo: run the example pipeline on the embedded local backend.
# make test: install system packages the tests need (Slurm, munge, Chromium), then run pytest.
# make test-fast: lint, types, doctests and the unit + emulator tests (no Slurm, browser, daemon,
# real control plane, Kueue or Karpenter): under 5 minutes, nothing to install beyond the venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast checks lint typecheck bench soak system-deps kubeplane kueue-background karpenter-background node-background vcluster-background slurm-background slurm-current wheel-smoke clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "k8s_ai_dev_repo.pth").write_text("$(CURDIR)\n")'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m example_project.demo

system-deps:
	bash scripts/install-system-deps.sh

# The real Kubernetes control plane (tests/kubeplane, Go): built once per machine into
# ~/.cache/k8s-ai-orchestrator (about 15 min cold on 2 cores), then reused. Without Go the
# Kubernetes tests run on the emulator only; with CI=true a missing Go is an error.
kubeplane:
	@bash scripts/build-kubeplane.sh || { rc=$$?; \
	  if [ $$rc -eq 3 ] && [ "$${CI:-}" != "true" ]; then \
	    echo "make: no Go toolchain: skipping the real control plane, Kubernetes tests use the emulator"; \
	  else exit $$rc; fi; }

# Kueue (tests/kueue, Go, about 10 min cold) builds in the background at the lowest CPU
# priority while the rest runs; the tests that need it run last (tests/conftest.py) and wait
# for it there (scripts/build-kueue.sh holds a lock). Its log: artifacts/kueue-build.log.
kueue-background:
	@if command -v go >/dev/null 2>&1 && ! bash scripts/build-kueue.sh --check >/dev/null 2>&1; then \
	  mkdir -p artifacts; echo "make: building Kueue in the background (artifacts/kueue-build.log)"; \
	  nohup nice -n 19 bash scripts/build-kueue.sh > artifacts/kueue-build.log 2>&1 < /dev/null & \
	fi

# Karpenter with its kwok cloud provider (tests/karpenter, Go, about 5 min cold on 2 cores)
# builds the same way, with the same lowest priority. Its log: artifacts/karpenter-build.log.
karpenter-background:
	@if command -v go >/dev/null 2>&1 && ! bash scripts/build-karpenter.sh --check >/dev/null 2>&1; then \
	  mkdir -p artifacts; echo "make: building Karpenter in the background (artifacts/karpenter-build.log)"; \
	  nohup nice -n 19 bash scripts/build-karpenter.sh > artifacts/karpenter-build.log 2>&1 < /dev/null & \
	fi

# The real node's programs (containerd, CNI plugins, pause; tests/node, Go, about 7-14 min
# cold) build the same way, with the same lowest priority; the tests on the real node run last.
# Its log: artifacts/node-build.log.
node-background:
	@if command -v go >/dev/null 2>&1 && ! bash scripts/build-node.sh --check >/dev/null 2>&1; then \
	  mkdir -p artifacts; echo "make: building the real node's programs in the background (artifacts/node-build.log)"; \
	  nohup nice -n 19 bash scripts/build-node.sh > artifacts/node-build.log 2>&1 < /dev/null & \
	fi

# The real vCluster syncer (github.com/loft-sh/vcluster v0.34.0; tests/vcluster, Go, about
# 5 min cold on 2 cores) builds the same way, with the same lowest priority.
# Its log: artifacts/vcluster-build.log.
vcluster-background:
	@if command -v go >/dev/null 2>&1 && ! bash scripts/build-vcluster.sh --check >/dev/null 2>&1; then \
	  mkdir -p artifacts; echo "make: building the real vCluster syncer in the background (artifacts/vcluster-build.log)"; \
	  nohup nice -n 19 bash scripts/build-vcluster.sh > artifacts/vcluster-build.log 2>&1 < /dev/null & \
	fi

# A current Slurm (trixie's slurm-wlm 24.11.5 source, C, about 5 min cold on 2 cores) built
# once per machine into the cache beside Debian 12's 22.05 packages, with its own prefix and
# PluginDir (scripts/build-slurm.sh; it installs bookworm's build dependencies it needs).
# Prints the prefix on its last line. `make test` builds it the same way as Kueue, in the
# background at the lowest priority; the tests on it (the 24.11 half of tests/slurm's versioned
# tests) run last and wait for it (the script holds a lock). Its log: artifacts/slurm-build.log.
slurm-current:
	nice -n 19 bash scripts/build-slurm.sh

slurm-background:
	@if command -v cc >/dev/null 2>&1 && ! bash scripts/build-slurm.sh --check >/dev/null 2>&1; then \
	  mkdir -p artifacts; echo "make: building the current Slurm in the background (artifacts/slurm-build.log)"; \
	  nohup nice -n 19 bash scripts/build-slurm.sh > artifacts/slurm-build.log 2>&1 < /dev/null & \
	fi

FAST_MARKERS := not slurm and not browser and not daemon and not controlplane and not contract \
  and not kueue and not karpenter and not realnode and not vcluster and not slow

checks: $(STAMP)
	$(BIN)/ruff check k8s_ai_orchestrator example_project tests benchmarks
	$(BIN)/ruff format --check k8s_ai_orchestrator example_project tests benchmarks
	$(BIN)/mypy k8s_ai_orchestrator
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider --doctest-modules k8s_ai_orchestrator example_project

test: kueue-background karpenter-background node-background vcluster-background slurm-background $(STAMP) system-deps kubeplane checks
	$(BIN)/pytest -q --durations=60
	bash scripts/wheel-smoke.sh $(BIN)/python

test-fast: checks
	$(BIN)/pytest -q -m "$(FAST_MARKERS)"

wheel-smoke: $(STAMP)
	bash scripts/wheel-smoke.sh $(BIN)/python

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python -m benchmarks.$$(basename $$b .py) || exit 1; done

soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak --kills 20

clean:
	rm -rf $(VENV) .demo artifacts
