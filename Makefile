# dbkeeper — run `make help` for the targets.

# Image of the manager for docker-build, docker-push and deploy.
IMG ?= dbkeeper:dev

# The pinned Kubernetes binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) are built once from the Go module proxy and
# cached outside the checkout, keyed by version. K8S_VERSION and CACHE_DIR are
# the Go code's devcluster.KubernetesVersion and devcluster.CacheDir(); the
# version is also hack/k8s/kubernetes/go.mod's (a test of internal/test/devcluster
# checks that the three agree). hack/k8s-tools.sh gets both from here.
K8S_VERSION ?= v1.37.2
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dbkeeper
K8S_TOOLS_DIR ?= $(CACHE_DIR)/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(K8S_TOOLS_DIR)

# cert-manager's controller and cainjector, built from hack/certmanager for
# verifying the deployment (test/deploy), cached the same way.
CERT_MANAGER_VERSION ?= v1.21.2
CERT_MANAGER_DIR ?= $(CACHE_DIR)/cert-manager/$(CERT_MANAGER_VERSION)
export CERT_MANAGER_ASSETS := $(CERT_MANAGER_DIR)

# The binaries of devcluster's real node (kubelet, kube-proxy, containerd and
# its runc shim, ctr, CoreDNS, local-path-provisioner), built from the wrapper
# modules under hack/ and cached, each rebuilt when its module's version moves.
NODE_TOOLS_DIR ?= $(CACHE_DIR)/node
export DBKEEPER_NODE_TOOLS := $(NODE_TOOLS_DIR)

# The binaries backups need outside the images (versitygw, the object store of
# devcluster and the backup tests), built from the wrapper modules under
# hack/backup and cached the same way.
BACKUP_TOOLS_DIR ?= $(CACHE_DIR)/backup
export DBKEEPER_BACKUP_TOOLS := $(BACKUP_TOOLS_DIR)

# The engine images the tests run on a real node (and its pause image), built
# here with no registry into ENGINE_IMAGES_DIR and listed in its images.txt.
ENGINE_IMAGES_DIR ?= $(CACHE_DIR)/images
export ENGINE_IMAGES_DIR

# Developer tools are pinned in hack/tools/go.mod and run with `go tool`.
GO_TOOL ?= go tool -modfile=$(CURDIR)/hack/tools/go.mod
CONTROLLER_GEN ?= $(GO_TOOL) controller-gen
KUSTOMIZE ?= $(GO_TOOL) kustomize
GOLANGCI_LINT ?= $(GO_TOOL) golangci-lint

KUBECTL ?= $(K8S_TOOLS_DIR)/kubectl

# Flags for `go test` in `make test` and `make test-fast`; TEST_P packages
# run at a time (hack/test.sh: then the real-node packages one at a time,
# alone).
TEST_FLAGS ?= -count=1 -timeout 30m
TEST_P ?= 2
export TEST_FLAGS TEST_P

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD, RBAC role and webhook configurations into config/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/..." paths="./internal/controller/..." paths="./webhooks/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook

.PHONY: generate
generate: ## Generate the DeepCopy methods of the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: verify-generated
verify-generated: ## Fail when generated files differ from what `make generate manifests` writes.
	hack/verify-generated.sh

.PHONY: fmt
fmt: ## Format the code with gofmt.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet (also on the nested tool modules).
	go vet ./...
	cd hack/certmanager && go vet ./...
	cd test/bench/plot && go vet ./...

.PHONY: lint
lint: ## Run golangci-lint (config: .golangci.yml).
	$(GOLANGCI_LINT) run ./...

# What `make test` and `make run REAL_NODE=true` set up first, in order
# (hack/setup.sh): the Debian packages when any is missing (as root;
# otherwise it prints the command), then each cache's missing binaries and
# images, each step timed.
SETUP_TEST ?= host-packages k8s-tools cert-manager-tools node-tools backup-tools engine-images
SETUP_REAL_NODE ?= host-packages k8s-tools node-tools backup-tools engine-images

.PHONY: setup
setup: ## Install and build what `make test` needs and is missing: Debian packages (root), Kubernetes and node binaries, images.
	MAKE="$(MAKE)" hack/setup.sh $(SETUP_TEST)

.PHONY: test
test: setup verify-generated vet lint ## Run every test: generated-files check, vet, lint, unit, fuzz seeds, envtest, e2e and the real-node tests.
	hack/test.sh all || { hack/check-no-leftovers.sh; exit 1; }
	hack/check-no-leftovers.sh

.PHONY: test-fast
test-fast: k8s-tools ## The inner loop: unit and envtest packages, no real node, no devcluster suite, no real PostgreSQL (about 1.5 minutes warm), with the time table.
	hack/test.sh fast

.PHONY: test-unit
test-unit: ## Run only the tests that need no API server.
	go test -count=1 -short ./...

# Long fault scenarios (crash soak and API server restart with 50 Databases,
# 60 s of conflicting writers, leader election with two timings) and fuzzing.
FUZZ_TIME ?= 30s

# FAULTS_REALNODE=false leaves out the real node's long schedule (30 steps
# of operations and faults, about half an hour): CI's time budget has no
# room for it, and make test runs its short form.
FAULTS_REALNODE ?= true

.PHONY: test-faults
test-faults: k8s-tools ## Run the fault soaks on devcluster (DBKEEPER_FAULTS=long), the long replication simulation and the real node's long schedule of operations and faults, then fuzz each admission target for FUZZ_TIME.
	DBKEEPER_FAULTS=long go test -count=1 -timeout 40m -v ./test/faults/ || { hack/check-no-leftovers.sh; exit 1; }
	hack/check-no-leftovers.sh
	DBKEEPER_FAULTS=long go test -count=1 -timeout 60m -run '^TestSimulation(Synchronous)?$$' -v ./internal/controller/
	if [ "$(FAULTS_REALNODE)" = true ]; then \
		DBKEEPER_FAULTS=long go test -count=1 -timeout 90m -run '^TestRealNodeFaultSchedule$$' -v ./test/realnode/ || { hack/check-no-leftovers.sh; exit 1; }; \
		hack/check-no-leftovers.sh; \
	fi
	go test -run '^$$' -fuzz '^FuzzDefault$$' -fuzztime $(FUZZ_TIME) ./internal/rules/
	go test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZ_TIME) ./internal/rules/
	go test -run '^$$' -fuzz '^FuzzAdmission$$' -fuzztime $(FUZZ_TIME) ./webhooks/v1alpha1/

# `make bench`: dbkeeper beside the floor on devcluster. BENCH_N Databases
# created by BENCH_CONCURRENCY clients, a BENCH_STEADY steady-state window;
# the figures go to BENCH_OUT, the table to stdout and docs/benchmarks.md.
# BENCH_ARGS are more flags of test/bench (go run ./test/bench -h).
BENCH_N ?= 1000
BENCH_CONCURRENCY ?= 16
BENCH_STEADY ?= 2m
BENCH_OUT ?= bin/bench.json
BENCH_ARGS ?=

.PHONY: bench
bench: k8s-tools ## Benchmark dbkeeper beside the API server's floor on devcluster (BENCH_N=1000: about 18 minutes on two idle cores) and update docs/benchmarks.md.
	go build -o bin/bench ./test/bench
	bin/bench -n $(BENCH_N) -concurrency $(BENCH_CONCURRENCY) -steady $(BENCH_STEADY) -out $(BENCH_OUT) \
		-doc docs/benchmarks.md -doc-plot benchmarks.png $(BENCH_ARGS)
	go -C test/bench/plot run . -in $(abspath $(BENCH_OUT)) -out $(CURDIR)/docs/benchmarks.png

# `make bench-replication`: pgbench through a 3-replica postgres Database's
# Service on devcluster's real node while faults are injected (switchover,
# pod deleted, postgres killed, network cut, and the pod deleted while the
# operator converges 1 000 other Databases on a fake node), BENCH_REPL_RUNS
# runs of each;
# the figures go to BENCH_REPL_OUT, the section to stdout and
# docs/benchmarks.md. BENCH_REPL_ARGS are more flags (go run
# ./test/benchreplication -h). Needs root, like the real-node tests.
BENCH_REPL_RUNS ?= 5
BENCH_REPL_CLIENTS ?= 4
BENCH_REPL_OUT ?= bin/bench-replication.json
BENCH_REPL_ARGS ?=

.PHONY: bench-replication
bench-replication: k8s-tools node-tools engine-images ## Measure write pauses, losses and TPS of a 3-replica postgres across faults on the real node, also under load (BENCH_REPL_RUNS=5: about 25 minutes on two idle cores) and update docs/benchmarks.md.
	go build -o bin/bench-replication ./test/benchreplication
	bin/bench-replication -runs $(BENCH_REPL_RUNS) -clients $(BENCH_REPL_CLIENTS) -out $(BENCH_REPL_OUT) \
		-doc docs/benchmarks.md -doc-plot benchmarks-replication.png $(BENCH_REPL_ARGS)
	go -C test/bench/plot run . -replication -in $(abspath $(BENCH_REPL_OUT)) -out $(CURDIR)/docs/benchmarks-replication.png

.PHONY: bench-go
bench-go: ## Run the Go microbenchmarks (defaulting and validation, builders).
	go test -run '^$$' -bench . -benchmem ./webhooks/... ./internal/...

##@ Build

.PHONY: build
build: ## Build the manager binary into bin/dbkeeper and the kubectl plugin into bin/kubectl-dbkeeper.
	CGO_ENABLED=0 go build -trimpath -o bin/dbkeeper ./cmd/dbkeeper
	CGO_ENABLED=0 go build -trimpath -o bin/kubectl-dbkeeper ./cmd/kubectl-dbkeeper

# RUN_ARGS are extra flags of `devcluster run`, e.g. RUN_ARGS="--nodes 3".
# REAL_NODE=true adds a real node (containerd + kubelet) that runs the pods.
# The recipe's shell execs devcluster, which is then make's own child: Ctrl-C
# (SIGINT to the whole process group) and SIGTERM to make (which make passes
# on) reach it directly; SIGINT, SIGHUP or SIGQUIT to make's PID alone, which
# make does not pass on, devcluster notices by watching make (hack/devcluster).
RUN_ARGS ?=
REAL_NODE ?= false

.PHONY: run
run: manifests generate ## Start devcluster, install dbkeeper with its webhooks and run it (Ctrl-C, or kill -INT of make's PID, stops all). USE_EXISTING_CLUSTER=true: the current kubeconfig, no webhooks.
ifeq ($(USE_EXISTING_CLUSTER),true)
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -
	$(KUBECTL) create namespace dbkeeper-system --dry-run=client -o yaml | $(KUBECTL) apply -f -
	go run ./cmd/dbkeeper --enable-webhooks=false --metrics-bind-address=0 --agent-keys-namespace=dbkeeper-system
else
ifeq ($(REAL_NODE),true)
	MAKE="$(MAKE)" hack/setup.sh $(SETUP_REAL_NODE)
else
	$(MAKE) --no-print-directory k8s-tools
endif
	go build -o bin/devcluster ./hack/devcluster
	exec bin/devcluster run --real-node=$(REAL_NODE) $(RUN_ARGS)
endif

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the manager image.
	docker push $(IMG)

.PHONY: cert-manager-tools
cert-manager-tools: ## Build cert-manager's controller and cainjector into the cache if missing (cold: about 6 minutes idle, more under load).
	hack/cert-manager-tools.sh "$(CERT_MANAGER_DIR)"

# The Debian packages the real node, the engine images' builds and the
# package tests with real servers need are listed, with how each is found,
# in hack/host-packages.sh.
.PHONY: host-packages
host-packages: ## Refresh apt's indexes (failing, with apt's words, when it cannot) and install the Debian packages the real node, the engine images and the PostgreSQL tests need (root).
	hack/host-packages.sh install

.PHONY: node-tools
node-tools: ## Build the real node's kubelet, kube-proxy, containerd, ctr, CoreDNS and local-path-provisioner into the cache if missing (cold: see README).
	hack/node-tools.sh "$(NODE_TOOLS_DIR)"

.PHONY: backup-tools
backup-tools: ## Build versitygw, the S3-compatible object store backups are tested against, into the cache if missing (cold: under a minute).
	hack/backup-tools.sh "$(BACKUP_TOOLS_DIR)"

.PHONY: k8s-tools
k8s-tools: ## Build the pinned Kubernetes binaries into the cache if missing (cold: about 13 minutes).
	hack/k8s-tools.sh "$(K8S_TOOLS_DIR)" "$(K8S_VERSION)"

.PHONY: engine-images
engine-images: ## Build the pause, postgres (15, 17), mariadb, barman-cloud, instance-agent and manager images into ENGINE_IMAGES_DIR if their inputs changed (cold: about 10 minutes; needs root and mmdebstrap).
	hack/engine-images.sh "$(ENGINE_IMAGES_DIR)"

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

# Databases are deleted first, while dbkeeper still runs: those with
# deletionPolicy Delete carry a finalizer that only dbkeeper removes.
DELETE_DATABASES = if $(KUBECTL) get crd databases.dbkeeper.io >/dev/null 2>&1; then \
	$(KUBECTL) delete databases.dbkeeper.io --all --all-namespaces --wait --timeout=5m; fi

.PHONY: uninstall
uninstall: manifests ## Delete every Database (Retain keeps their volumes), then the CRDs.
	$(DELETE_DATABASES)
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

# deploy sets the image in an overlay under bin/ (not in config/, so the
# checkout stays clean) and applies it.
DEPLOY_DIR ?= bin/deploy
# DEPLOY_CONFIG is the install deploy applies: config/default (every
# namespace) or config/namespaced (the namespaces it lists; docs/security.md §11).
DEPLOY_CONFIG ?= config/default

.PHONY: deploy
deploy: manifests ## Deploy dbkeeper with image IMG to the cluster of the current kubeconfig (cert-manager must run there); DEPLOY_CONFIG=config/namespaced for the namespaced install.
	rm -rf $(DEPLOY_DIR) && mkdir -p $(DEPLOY_DIR)
	printf 'resources:\n- %s\n' "$$(realpath --relative-to=$(DEPLOY_DIR) $(DEPLOY_CONFIG))" >$(DEPLOY_DIR)/kustomization.yaml
	cd $(DEPLOY_DIR) && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build $(DEPLOY_DIR) | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Delete every Database, then remove dbkeeper from the cluster of the current kubeconfig.
	$(DELETE_DATABASES)
	$(KUSTOMIZE) build $(DEPLOY_CONFIG) | $(KUBECTL) delete --ignore-not-found -f -
