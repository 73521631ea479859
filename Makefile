# Phaseless build. `make demo` and `make test` are the two commands a newcomer needs.
GO        ?= go
PKG       := github.com/phaseless/phaseless
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X $(PKG)/internal/cli.Version=$(VERSION) -X $(PKG)/internal/cli.Commit=$(COMMIT)
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# -race on every package except the numeric ones whose tests are CPU-bound
# training/forward passes: the race detector slows them 5-10x and they share no
# state across goroutines beyond what the race-tested packages cover.
RACE_SKIP := /models/lm|/models/predictor|/models/lmtrain|/models/edgemodel|/models/cloudmodel
TEST_FLAGS ?= -timeout 20m
# Tests in race-tested packages that run smaller or not at all under -race
# (each says why) and in full in a second pass without it.
RACE_FULL := ^Test(DocsMatchCode|OperatorWalkthrough|RunnableBlocks|LearningLoop|CalibrationFollowsRetrainedRouter|ToolRequestsStayOnTheDevice|KillAfterAnswersKeepsEveryRecord|TwoHundredConcurrentLocalClients|ThousandDevices|RolloutThousandDevices|KillDuringIngestStoresEachRecordOnce|ModelTrainTelemetry|ModelEval|LMTrainWritesLoadableModel|LMToolPrior|TelemetryAndConfigThroughLossyLinkAndTunnel|CloudOnlyToolsThroughAgent|BlackoutPastKeepAlive|ResumeFlappingLink|ResumeAfterBlackout|BlackoutResumes|LongBlackoutContinuesLocally|ConstrainedRepliesOnCloud|ConstrainedRepliesThroughAgent|LengthCutDropsMarker|ProbeGateRollout|AgentUpdateProbeGate|ModelGateOnRealModels)$$

# The device build leaves out net/http's bundled HTTP/2 (0.5 MiB): the agent
# serves HTTP/1.1 on loopback and talks to the cloud over QUIC.
AGENT_TAGS := nethttpomithttp2
# ARM devices also leave out the Jinja engine for models' own chat templates
# and the OTLP span exporter (docs/client.md: the cloud exports the device's
# traces): each makes the linker keep every exported method, +7.1 and +9.4 MiB
# over the 20 MiB budget (docs/engine.md, docs/agent.md).
DEVICE_TAGS := $(AGENT_TAGS),lm_nojinja,nootlp

.PHONY: all build cross test lint vet fmt-check fuzz-smoke bench demo models router image clean

all: build

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -tags $(AGENT_TAGS) -trimpath -ldflags '$(LDFLAGS)' -o bin/phaseless-agent ./agent/cmd/phaseless-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/phaseless-cloud ./cloud/cmd/phaseless-cloud
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/phaselessctl ./cloud/cmd/phaselessctl

# Static, stripped agent binaries for the device boards.
cross:
	@mkdir -p bin/linux-arm64 bin/linux-armv7
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags $(DEVICE_TAGS) -trimpath -ldflags '$(LDFLAGS)' -o bin/linux-arm64/phaseless-agent ./agent/cmd/phaseless-agent
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build -tags $(DEVICE_TAGS) -trimpath -ldflags '$(LDFLAGS)' -o bin/linux-armv7/phaseless-agent ./agent/cmd/phaseless-agent
	@ls -l bin/linux-arm64/phaseless-agent bin/linux-armv7/phaseless-agent

# Container images of the cloud (with phaselessctl beside it) and of
# phaselessctl alone, on an empty base, without Docker or a registry:
# bin/image/oci (an OCI layout) and docker-archive tarballs. See docs/deploy.md.
image: build
	@mkdir -p bin/image
	bin/phaselessctl image build --entrypoint phaseless-cloud --ref phaseless/phaseless-cloud:$(VERSION) --version $(VERSION) \
		--ports 8080/tcp,4433/udp,1883/tcp,8883/tcp --oci bin/image/oci --tar bin/image/phaseless-cloud.tar bin/phaseless-cloud bin/phaselessctl
	bin/phaselessctl image build --entrypoint phaselessctl --ref phaseless/phaselessctl:$(VERSION) --version $(VERSION) \
		--oci bin/image/oci --tar bin/image/phaselessctl.tar bin/phaselessctl

# Without git (a tarball) the files come from find; an empty list is an error,
# never a silent pass.
fmt-check:
	@files=$$(git ls-files '*.go' 2>/dev/null); [ -n "$$files" ] || files=$$(find . -name '*.go' -not -path '*/node_modules/*' -not -path './.git/*'); \
	if [ -z "$$files" ]; then echo "fmt-check: no Go files found"; exit 1; fi; \
	out=$$(gofmt -l $$files); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: fmt-check vet
	$(STATICCHECK) ./...

test: lint
	$(GO) test -race $(TEST_FLAGS) $$($(GO) list ./... | grep -Ev '$(RACE_SKIP)')
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -E '$(RACE_SKIP)' || true)
	$(GO) test $(TEST_FLAGS) -run 'ZeroRTT' ./transport/quic/  # skipped under -race: quic-go#4303
	$(GO) test $(TEST_FLAGS) -run 'NoAlloc' ./models/textfeat/  # skipped under -race: sync.Pool drops items at random there
	$(GO) test -race $(TEST_FLAGS) -run 'Concurrent|Swappable' ./models/predictor/  # its shared state, under the race detector
	# Tests that -race shrinks or skips (kill -9 crash tests, training, thousand-device fleets), whole, without it.
	$(GO) test $(TEST_FLAGS) -run '$(RACE_FULL)' ./agent/ ./agent/fleetclient/ ./agent/probegate/ ./cloud/ ./cloud/fleet/ ./cloud/ctl/ ./internal/docscheck/ ./transport/quic/
	$(MAKE) fuzz-smoke

# A few seconds of fuzzing for every fuzz target (FUZZTIME=2s each).
fuzz-smoke:
	GO=$(GO) .ci/fuzz-smoke

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build
	$(GO) run ./examples/demo

# Retrains every shipped model from data in the repo (about 30 minutes on 2
# cores): the router predictor (byte-identical on amd64), the edge model
# embedded in the agent, and the cloud's default model. See docs/models.md.
models: build
	bin/phaselessctl lm train --preset edge --out bin/edge-base.gguf
	bin/phaselessctl lm train --preset edge-tools --init bin/edge-base.gguf --out models/edgemodel/edge.gguf
	bin/phaselessctl lm toolprior --in models/edgemodel/edge.gguf --out models/edgemodel/edge.gguf
	bin/phaselessctl lm train --preset cloud --out models/cloudmodel/cloud.gguf
	$(MAKE) router

# After a new edge or cloud model: the edge block's prompt list from the
# edge corpus, a regrade of the routing prompts with the shipped models
# (about 9 minutes when either changed, seconds otherwise) and the router
# retrained on the grades, beside the earlier routers (docs/predictor.md,
# "Regrade and retrain").
router:
	UPDATE_EDGE_PROMPTS=1 $(GO) test -count=1 -run TestEdgePromptsUpToDate ./models/predictor/train
	$(MAKE) build
	bin/phaselessctl model grade
	bin/phaselessctl model train --out models/predictor/predictor.onnx --compare models/predictor/testdata/predictor-edge-v4.onnx --compare models/predictor/testdata/predictor-edge-v3.onnx --compare models/predictor/testdata/predictor-edge-v2.onnx --compare models/predictor/testdata/predictor-edge-v1.onnx

clean:
	rm -rf bin
