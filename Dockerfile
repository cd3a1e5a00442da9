# syntax=docker/dockerfile:1
# Images for the hub, the agent and the runner (plan/apply Jobs), multi-arch:
#   docker buildx build --platform linux/amd64,linux/arm64 --target hub    -t ghcr.io/magosfleet/magos-hub:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 --target agent  -t ghcr.io/magosfleet/magos-agent:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 --target runner -t ghcr.io/magosfleet/magos-runner:0.1.0 .
# Everything is compiled from source with the Go module proxy (OpenTofu included); every image
# runs as a non-root user on a distroless base.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY go.work go.work.sum ./
COPY apis/go.mod apis/go.sum apis/
COPY pkg/go.mod pkg/go.sum pkg/
COPY hub/go.mod hub/go.sum hub/
COPY agent/go.mod agent/go.sum agent/
COPY tools/go.mod tools/go.sum tools/
RUN --mount=type=cache,target=/root/go/pkg/mod cd apis && go mod download && cd ../pkg && go mod download && \
    cd ../hub && go mod download && cd ../agent && go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/ ./hub/cmd/magos-hub ./hub/cmd/magosctl ./agent/cmd/magos-agent

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS tofu
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY tools/provision-assets.sh tools/
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH MAGOS_ASSETS_ONLY=tofu MAGOS_ASSETS_DIR=/assets \
    bash tools/provision-assets.sh && cp /assets/tofu-*/tofu /out-tofu

FROM gcr.io/distroless/static-debian12:nonroot AS hub
COPY --from=build /out/magos-hub /out/magosctl /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/magos-hub"]
CMD ["controller"]

FROM gcr.io/distroless/static-debian12:nonroot AS agent
COPY --from=build /out/magos-agent /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/magos-agent"]
CMD ["controller"]

# The runner: the agent's own `runner` entrypoint plus OpenTofu. Jobs mount an emptyDir on /tmp
# (the root filesystem is read-only).
FROM gcr.io/distroless/static-debian12:nonroot AS runner
COPY --from=build /out/magos-agent /usr/local/bin/
COPY --from=tofu /out-tofu /usr/local/bin/tofu
ENV HOME=/tmp MAGOS_TOFU=/usr/local/bin/tofu
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/magos-agent", "runner"]
