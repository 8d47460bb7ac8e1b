# Build the manager binary: static, no cgo, reproducible paths, no VCS
# stamp. make engine-images builds the same image without Docker
# (test/images/dbkeeper), and test/deploy checks that both give the same bytes.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/dbkeeper/ cmd/dbkeeper/
COPY cmd/dbkeeper-instance/ cmd/dbkeeper-instance/
COPY internal/ internal/
COPY webhooks/ webhooks/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o dbkeeper-instance ./cmd/dbkeeper-instance
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o manager ./cmd/dbkeeper

# Only the binaries, on distroless static, as the nonroot user: the manager,
# and the instance agent that postgres pods install from this same image
# (--instance-image defaults to it). The manager is /manager, not /dbkeeper:
# those pods mount an emptyDir at /dbkeeper/bin in this image, which cannot
# be made under a file /dbkeeper.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /workspace/dbkeeper-instance ./
USER 65532:65532
ENTRYPOINT ["/manager"]
