# Images for the hub, the agent and the runner (plan/apply Jobs), built on this machine from
# scratch: no base image is pulled (the engine here reaches no registry). `make images` prepares
# the build context (bin/images/context: the static binaries built with the Go module proxy,
# OpenTofu from the cached test assets, a passwd entry for the non-root user, the host's CA
# certificates when it has them, and the provider mirror the runner carries) and builds the three
# targets:
#   docker build --target hub    -t magos-hub:dev    bin/images/context -f Dockerfile
#   docker build --target agent  -t magos-agent:dev  bin/images/context -f Dockerfile
#   docker build --target runner -t magos-runner:dev bin/images/context -f Dockerfile
# Every image runs as the non-root user 65532 and needs no writable root filesystem: /tmp is an
# empty directory that Jobs mount an emptyDir on.
#
# `make release` assembles the same three stages for linux/amd64 and linux/arm64 without an
# engine (tools/release reads this file; docs/releasing.md): it accepts only the instructions
# used here (FROM scratch or a stage, COPY, USER, ENV, ENTRYPOINT, CMD) and fails on any other.

FROM scratch AS base
COPY rootfs/ /
USER 65532:65532

FROM base AS hub
COPY bin/magos-hub bin/magosctl /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/magos-hub"]
CMD ["controller"]

FROM base AS agent
COPY bin/magos-agent /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/magos-agent"]
CMD ["controller"]

# The runner: the agent's own `runner` entrypoint, OpenTofu, and the provider mirror its runs
# install providers from (MAGOS_PROVIDER_MIRROR; never a registry: see docs/providers.md). The
# mirror's path is runner.ImageProviderMirror (pkg/runner), which the agent's Jobs name too.
FROM base AS runner
COPY bin/magos-agent bin/tofu /usr/local/bin/
COPY providers/ /usr/local/share/magos/providers/
ENV HOME=/tmp MAGOS_TOFU=/usr/local/bin/tofu MAGOS_PROVIDER_MIRROR=/usr/local/share/magos/providers
ENTRYPOINT ["/usr/local/bin/magos-agent", "runner"]
