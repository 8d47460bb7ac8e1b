# Build the manager binary: static, no cgo, reproducible paths.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/dbkeeper/ cmd/dbkeeper/
COPY internal/ internal/
COPY webhooks/ webhooks/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o dbkeeper ./cmd/dbkeeper

# Only the binary, on distroless static, as the nonroot user.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/dbkeeper .
USER 65532:65532
ENTRYPOINT ["/dbkeeper"]
