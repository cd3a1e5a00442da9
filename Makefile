# Magos Fleet developer tasks. Run `make help` for the list.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

MODULES     := apis pkg hub agent tools
PACKAGES    := $(addprefix ./,$(addsuffix /...,$(MODULES)))
CRD_DIRS    := charts/magos-hub/files/crds charts/magos-agent/files/crds
BIN         := bin
GO_TEST_FLAGS ?= -timeout 40m
# VERSION is stamped into every binary (pkg/version), the images' tag of a release and the charts.
# Between releases the file VERSION names the next release with a -dev suffix; `make release`
# takes VERSION=vX.Y.Z on the command line (docs/releasing.md).
VERSION     ?= $(shell cat VERSION)
LDFLAGS     := -X github.com/magosfleet/magos/pkg/version.version=$(VERSION)
# Assets (etcd, kube-apiserver, tofu) are built once from the Go module proxy and cached.
# (The assignment fails the recipe when the script fails; a bare eval "$$(...)" would not.)
WITH_ASSETS := assets="$$(tools/provision-assets.sh)" && eval "$$assets" && export KUBEBUILDER_ASSETS MAGOS_TOFU MAGOS_PROVIDERS &&

# prereqs-TARGET checks, before anything is built, that this machine has what make TARGET needs
# beyond Go (tools/prereqs.sh: Debian packages, a Docker daemon) and names the command that
# installs what is missing.
PREREQS := $(addprefix prereqs-,test test-real demo-real node-image)
.PHONY: $(PREREQS)
$(PREREQS):
	@tools/prereqs.sh $(@:prereqs-%=%)

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: demo
demo: magos-dev ## Start a local hub and three regional spokes and roll a change out region by region.
	$(BIN)/magos-dev demo $(DEMO_FLAGS)

.PHONY: dev
dev: magos-dev ## Start the local fleet and keep it running (kubeconfigs under ~/.cache/magos/dev).
	$(BIN)/magos-dev up $(DEV_FLAGS)

# $(call quietly,NAME,COMMAND,WHAT) runs COMMAND (a go build or the like, in a subshell) with its
# output in $(BIN)/NAME.log: on a fresh machine the go commands download the Go modules, and their
# hundreds of "go: downloading" lines would bury what the target shows. The terminal gets
# "NAME: WHAT (log: ...)" before (WHAT says about how long it takes, without commas) and one line
# after, or the log's last 40 lines when COMMAND fails.
quietly = mkdir -p $(BIN) && t0=$$(date +%s) && log=$(BIN)/$(1).log && \
  echo "$(1): $(3) (log: $$log)" && \
  { ( $(2) ) >$$log 2>&1 || { echo "$(1): failed; the last 40 lines of $$log:"; tail -n 40 $$log; exit 1; }; } && \
  echo "$(1): done in $$(($$(date +%s) - t0)) s"

.PHONY: magos-dev
magos-dev:
	@$(call quietly,magos-dev,go build -ldflags '$(LDFLAGS)' -o $(BIN)/magos-dev ./tools/cmd/magos-dev,building: a few minutes on a first run (it downloads and compiles the Go modules) and seconds after that)

# The CRDs are generated into files/crds/ of both charts exactly as controller-gen writes them
# (tools/generated checks they are current); each chart's templates/crds.yaml adds
# helm.sh/resource-policy: keep when it renders them, so no post-processing is needed here and
# the local test clusters load the same files.
.PHONY: generate
generate: ## Regenerate deepcopy code and the CRDs of both charts.
	go tool controller-gen object paths=./apis/...
	go tool controller-gen crd paths=./apis/... output:crd:artifacts:config=$(firstword $(CRD_DIRS))
	rm -rf $(lastword $(CRD_DIRS)) && cp -r $(firstword $(CRD_DIRS)) $(lastword $(CRD_DIRS))

.PHONY: build
build: ## Build the hub, agent, magosctl and magos-dev binaries into bin/.
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./hub/cmd/... ./agent/cmd/... ./tools/cmd/...

IMAGES_DIR := $(BIN)/images
IMAGE_TAG   ?= dev

.PHONY: images
images: ## Build the magos-hub, magos-agent and magos-runner images from scratch into the local engine and bin/images/*.tar.
	@$(call quietly,images-context,tools/image-context.sh $(IMAGES_DIR)/context "$$(go env GOARCH)" '$(LDFLAGS)',building magos-hub magosctl and magos-agent for the images: a few minutes on a first run)
	for target in hub agent runner; do \
	  docker build -q --target $$target -t magos-$$target:$(IMAGE_TAG) -f Dockerfile $(IMAGES_DIR)/context >/dev/null && \
	  docker save -o $(IMAGES_DIR)/magos-$$target.tar magos-$$target:$(IMAGE_TAG) && \
	  echo "images: magos-$$target:$(IMAGE_TAG) $$(docker image inspect -f '{{.Size}}' magos-$$target:$(IMAGE_TAG) | awk '{printf "%.1f MiB", $$1/1048576}') -> $(IMAGES_DIR)/magos-$$target.tar"; \
	done

# make release VERSION=vX.Y.Z builds a release of the checked-out commit into bin/release/vX.Y.Z
# (docs/releasing.md): magosctl for each CLI platform; the images, each one OCI image index of
# linux/amd64 and linux/arm64 (assembled by tools/release from the Dockerfile and a build
# context per platform, no engine and no registry involved) and per-platform `docker save` tars;
# the charts packaged; NOTES.md (the version's CHANGELOG.md section) and SHA256SUMS. It refuses a
# VERSION that is not vX.Y.Z (or vX.Y.Z-rc.N) of the VERSION file or has no CHANGELOG.md section,
# and a tree with uncommitted changes unless RELEASE_ALLOW_DIRTY=1 (for trying it out).
RELEASE_DIR       = $(BIN)/release/$(VERSION)
RELEASE_CLI       := linux/amd64 linux/arm64 darwin/arm64
RELEASE_IMAGE_ARCH := amd64 arm64
IMAGE_REPO        ?= ghcr.io/magosfleet
RELEASE_ALLOW_DIRTY ?=

.PHONY: release
release: ## Build a release into bin/release/VERSION (make release VERSION=vX.Y.Z; docs/releasing.md).
	@cd tools/release && GOWORK=off go build -o $(abspath $(BIN))/magos-release ./cmd/magos-release
	@$(BIN)/magos-release check --version '$(VERSION)' --version-file VERSION --changelog CHANGELOG.md
	@if [[ -n "$$(git status --porcelain)" && "$(RELEASE_ALLOW_DIRTY)" != 1 ]]; then 	  echo "release: the tree has uncommitted changes (git status); commit them, or RELEASE_ALLOW_DIRTY=1 to try a release out"; exit 1; fi
	@t0=$$(date +%s) && rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR) && \
	for p in $(RELEASE_CLI); do \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -ldflags='-s -w $(LDFLAGS)' \
	    -o $(RELEASE_DIR)/magosctl-$(VERSION)-$${p%/*}-$${p#*/} ./hub/cmd/magosctl; \
	done && \
	contexts=() && for arch in $(RELEASE_IMAGE_ARCH); do \
	  echo "release: build context for linux/$$arch (a first build of OpenTofu and the providers for it takes as long as the host's first build of them)" && \
	  tools/image-context.sh $(RELEASE_DIR)/.context/linux-$$arch $$arch '$(LDFLAGS)' && \
	  contexts+=(--context linux/$$arch=$(RELEASE_DIR)/.context/linux-$$arch); \
	done && \
	$(BIN)/magos-release images --dockerfile Dockerfile --version $(VERSION) --revision "$$(git rev-parse HEAD)" \
	  --created "$$(git log -1 --format=%cI)" --repo $(IMAGE_REPO) --out $(RELEASE_DIR) "$${contexts[@]}" && \
	rm -rf $(RELEASE_DIR)/.context && \
	$(BIN)/magos-release charts --version $(VERSION) --out $(RELEASE_DIR) charts/magos-hub charts/magos-agent && \
	$(BIN)/magos-release notes --version $(VERSION) --changelog CHANGELOG.md --out $(RELEASE_DIR)/NOTES.md && \
	$(BIN)/magos-release sums $(RELEASE_DIR) && \
	echo "release: $(VERSION) in $(RELEASE_DIR) in $$(($$(date +%s) - t0))s:" && \
	(cd $(RELEASE_DIR) && ls -l --block-size=K | tail -n +2)

# make test-real runs the production path on real nodes: two single-node clusters in Docker
# containers (tools/realnode), the charts installed with Helm, the hub and agent as Pods of the
# images above and every run a Job. Its output goes to stderr; the run ends with one line on
# stdout: real-node: pods=N jobs=J helm-releases=R ok.
.PHONY: node-image
node-image: prereqs-node-image ## Build the magos-node image (a single-node cluster per container) and the sandbox image.
	tools/realnode/node/build.sh $(IMAGES_DIR) >/dev/null

.PHONY: test-real
test-real: prereqs-test-real images ## Install both charts into real clusters in Docker and roll out through runner Jobs.
	@$(call quietly,magosctl,go build -ldflags '$(LDFLAGS)' -o $(BIN)/magosctl ./hub/cmd/magosctl,building: seconds)
	@$(call quietly,realnode-modules,cd tools/realnode && GOWORK=off go list -deps -test ./... >/dev/null,downloading the Go modules of tools/realnode's tests: a minute on a first run)
	@node="$$(tools/realnode/node/build.sh $(IMAGES_DIR))" && eval "$$node" && summary="$$(mktemp)" && \
	  cd tools/realnode && MAGOS_NODE_IMAGE="$$MAGOS_NODE_IMAGE" MAGOS_IMAGES_DIR="$(abspath $(IMAGES_DIR))" \
	  MAGOS_MAGOSCTL="$(abspath $(BIN))/magosctl" MAGOS_IMAGE_TAG=$(IMAGE_TAG) MAGOS_REAL_SUMMARY="$$summary" \
	  GOWORK=off go test -count=1 -timeout 40m -v $(REAL_TEST_FLAGS) ./... >&2 && cat "$$summary"

# make test-upgrade upgrades the previous release to this checkout on real nodes, mid-rollout
# (TestUpgradeMidRollout in tools/realnode; docs/operations.md#upgrading). UPGRADE_FROM names
# the release to upgrade from: empty for the previous release (tools/upgrade-from.sh: the newest
# vX.Y.Z tag before HEAD, else CHANGELOG.md's newest release), or any git ref. That release's
# images and charts are built from its own tree (tools/upgrade-old-release.sh, under
# $(UPGRADE_DIR)); the nodes load both releases' images. It ends with one line on stdout:
# upgrade: <from> -> <tag> mid-rollout ok: ...
UPGRADE_FROM ?=
UPGRADE_DIR  := $(BIN)/upgrade

.PHONY: test-upgrade
test-upgrade: prereqs-test-real images ## Upgrade the previous release (UPGRADE_FROM=<ref>) to this checkout on real nodes, mid-rollout.
	@$(call quietly,magosctl,go build -ldflags '$(LDFLAGS)' -o $(BIN)/magosctl ./hub/cmd/magosctl,building: seconds)
	@from="$$(tools/upgrade-from.sh $(UPGRADE_FROM))" && eval "$$from" && \
	  echo "test-upgrade: upgrading from $$MAGOS_UPGRADE_FROM_VERSION (commit $$MAGOS_UPGRADE_FROM_COMMIT; $$MAGOS_UPGRADE_FROM_HOW) to $(VERSION) (commit $$(git rev-parse HEAD), images :$(IMAGE_TAG))" >&2 && \
	  old="$(UPGRADE_DIR)/$$MAGOS_UPGRADE_FROM_VERSION" && \
	  tools/upgrade-old-release.sh "$$old" "$$MAGOS_UPGRADE_FROM_VERSION" "$$MAGOS_UPGRADE_FROM_COMMIT" && \
	  node="$$(tools/realnode/node/build.sh $(IMAGES_DIR))" && eval "$$node" && \
	  imgs="$(UPGRADE_DIR)/images" && rm -rf "$$imgs" && mkdir -p "$$imgs" && \
	  ln -f $(IMAGES_DIR)/pause.tar $(IMAGES_DIR)/magos-hub.tar $(IMAGES_DIR)/magos-agent.tar $(IMAGES_DIR)/magos-runner.tar "$$imgs/" && \
	  for target in hub agent runner; do ln -f "$$old/images/magos-$$target.tar" "$$imgs/from-magos-$$target.tar"; done && \
	  summary="$$(mktemp)" && cd tools/realnode && \
	  MAGOS_NODE_IMAGE="$$MAGOS_NODE_IMAGE" MAGOS_IMAGES_DIR="$(abspath $(UPGRADE_DIR))/images" \
	  MAGOS_MAGOSCTL="$(abspath $(BIN))/magosctl" MAGOS_IMAGE_TAG=$(IMAGE_TAG) MAGOS_REAL_SUMMARY="$$summary" \
	  MAGOS_UPGRADE_FROM_VERSION="$$MAGOS_UPGRADE_FROM_VERSION" MAGOS_UPGRADE_FROM_COMMIT="$$MAGOS_UPGRADE_FROM_COMMIT" \
	  MAGOS_UPGRADE_FROM_CHARTS="$(abspath $(UPGRADE_DIR))/$$MAGOS_UPGRADE_FROM_VERSION/charts" \
	  GOWORK=off go test -count=1 -timeout 30m -v -run '^TestUpgradeMidRollout$$' $(UPGRADE_TEST_FLAGS) . >&2 && cat "$$summary"

# make demo-real is make demo on real nodes: a hub node and three spoke nodes (us-east-1,
# eu-west-1, ap-south-1) on the Docker network magos-demo (10.214.0.0/24, apart from
# test-real's), both charts installed with Helm, every run a runner Job, and the Rollout
# printed as `magosctl rollout status` shows it until every region applied. It removes its
# nodes and network on exit and on Ctrl-C.
.PHONY: demo-real
demo-real: prereqs-demo-real images ## Roll a change out region by region on real nodes (Docker), every run a Job.
	@$(call quietly,magosctl,go build -ldflags '$(LDFLAGS)' -o $(BIN)/magosctl ./hub/cmd/magosctl,building: seconds)
	@$(call quietly,magos-demo-real,cd tools/realnode && GOWORK=off go build -o $(abspath $(BIN))/magos-demo-real ./cmd/magos-demo-real,building: a minute on a first run)
	@node="$$(tools/realnode/node/build.sh $(IMAGES_DIR))" && eval "$$node" && \
	  cd tools/realnode && \
	  MAGOS_NODE_IMAGE="$$MAGOS_NODE_IMAGE" MAGOS_IMAGES_DIR="$(abspath $(IMAGES_DIR))" \
	  MAGOS_MAGOSCTL="$(abspath $(BIN))/magosctl" MAGOS_IMAGE_TAG=$(IMAGE_TAG) \
	  $(abspath $(BIN))/magos-demo-real $(DEMO_REAL_FLAGS)

.PHONY: assets
assets: ## Build etcd, kube-apiserver, tofu and the runner's providers from the Go module proxy (cached).
	tools/provision-assets.sh

.PHONY: test
test: prereqs-test ## Run every test, against real API servers and a real tofu.
	@$(call quietly,test-modules,go list -deps -test $(PACKAGES) >/dev/null && cd charts/tests && GOWORK=off go list -deps -test ./... >/dev/null,downloading the Go modules the tests need: a few minutes on a first run)
	$(WITH_ASSETS) go test $(GO_TEST_FLAGS) $(PACKAGES)
	$(WITH_ASSETS) cd charts/tests && GOWORK=off go test $(GO_TEST_FLAGS) ./...
	cd tools/release && GOWORK=off go test $(GO_TEST_FLAGS) ./...

# make chaos runs TestChaos alone, longer than in make test. Its output goes to stderr, and the run
# ends with one summary line on stdout: chaos: trials=N faults=F violations=V seed=S.
CHAOS_TRIALS  ?= 10
CHAOS_SEED    ?=
CHAOS_COMMITS ?= 2

.PHONY: chaos
chaos: ## Roll commits out under injected faults (CHAOS_TRIALS=10 CHAOS_SEED=<n> CHAOS_COMMITS=2).
	@$(WITH_ASSETS) summary="$$(mktemp)" && rc=0 && \
	MAGOS_CHAOS_TRIALS=$(CHAOS_TRIALS) MAGOS_CHAOS_SEED=$(CHAOS_SEED) MAGOS_CHAOS_COMMITS=$(CHAOS_COMMITS) \
	MAGOS_CHAOS_SUMMARY="$$summary" go test -count=1 -timeout 240m -v -run '^TestChaos$$' ./tools/e2e/ >&2 || rc=$$?; \
	if [[ -s "$$summary" ]]; then cat "$$summary"; else echo "chaos: no summary: the test ended before writing it (see its output above)"; fi; \
	rm -f "$$summary"; exit $$rc

# make fuzz runs each Go fuzz target for FUZZTIME, one after the other (make test runs their seed
# corpora). A crash stops it and leaves the input under the package's testdata/fuzz.
FUZZTIME     ?= 30s
FUZZ_FLAGS   ?=
FUZZ_TARGETS := FuzzLoadConfig:./hub/registry FuzzDecodeSpec:./pkg/runner FuzzPolicy:./pkg/policy FuzzMirrorReader:./pkg/mirror

.PHONY: fuzz
fuzz: ## Fuzz the hub config, the run spec, CEL policies and mirrors (FUZZTIME=30s each).
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $${t%%:*} ($${t#*:}) for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) "$${t#*:}"; \
	done

.PHONY: bench
bench: ## Run the benchmarks and print their numbers.
	$(WITH_ASSETS) go test -run '^$$' -bench . -benchmem $(PACKAGES)

# make bench-handoff times the step handoff on the dev fleet (tools/e2e BenchmarkStepHandoff: the
# real hub and three real agents, from one step's Workspace Applied on its spoke to the next
# step's granted on its own, split into the legs up, decide and down) and, beside it, the floor
# (BenchmarkHandoffFloor: the same watches and patches made by bare clients). HANDOFF_RUNS
# Rollouts of two handoffs each; HANDOFF_IDLE_CLUSTERS more clusters registered, never connected.
HANDOFF_RUNS          ?= 20
HANDOFF_IDLE_CLUSTERS ?= 0

.PHONY: bench-handoff
bench-handoff: ## Time the step handoff across three spokes, and its floor (HANDOFF_RUNS=20 HANDOFF_IDLE_CLUSTERS=0).
	@$(WITH_ASSETS) cd tools/e2e && MAGOS_BENCH_IDLE_CLUSTERS=$(HANDOFF_IDLE_CLUSTERS) go test -count=1 -timeout 60m -run '^$$' \
	  -bench '^(BenchmarkStepHandoff|BenchmarkHandoffFloor)$$' -benchtime $(HANDOFF_RUNS)x .

# make bench-scale measures one hub at fleet scale (tools/scalebench): a real hub API server and
# the real magos-hub, SCALE_CLUSTERS agent clusters registered through its config file, and as
# many emulated agents running agent/hubsync with their own credentials. Progress goes to
# stderr; stdout gets a table per size and, at the end, one line per size:
# scale: clusters=N workspaces=W rollout_p90_s=A concurrent_p90_s=B hub_rss_mib=M hub_heap_mib=H requests_per_grant=R agent_writes_per_run=X agent_heartbeats_per_run=L apiserver_cpu_ms_per_run=Y
SCALE_CLUSTERS   ?= 100
SCALE_WORKSPACES ?= 10
SCALE_REPEATS    ?= 10
SCALE_CONCURRENT ?= 100
SCALE_RUN_DELAY  ?= 0s
SCALE_FLAGS      ?=

.PHONY: bench-scale
bench-scale: ## Measure one hub with emulated agent clusters (SCALE_CLUSTERS=100,300,1000 SCALE_RUN_DELAY=0s).
	@$(WITH_ASSETS) go run ./tools/cmd/magos-bench-scale --clusters $(SCALE_CLUSTERS) --workspaces $(SCALE_WORKSPACES) \
	  --repeats $(SCALE_REPEATS) --concurrent $(SCALE_CONCURRENT) --run-delay $(SCALE_RUN_DELAY) $(SCALE_FLAGS)

.PHONY: lint
lint: check-deps ## gofmt, go vet, and no test support in the binaries.
	@out=$$(gofmt -l $(MODULES) charts/tests); if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(PACKAGES)
	cd charts/tests && GOWORK=off go vet ./...
	cd tools/realnode && GOWORK=off go vet ./...
	cd tools/release && GOWORK=off go vet ./...

# The production binaries (magos-hub, magosctl, magos-agent) must not be built from test
# support (pkg/testenv, pkg/localcluster, hub/hubtest, Go's testing): tools/deps lists their
# dependencies. make test runs it too.
.PHONY: check-deps
check-deps: ## Fail when a production binary depends on test support.
	go test -count=1 ./tools/deps
