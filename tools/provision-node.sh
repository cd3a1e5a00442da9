#!/usr/bin/env bash
# provision-node.sh builds what a real Kubernetes node needs, into the same versioned cache as
# provision-assets.sh, from the Go module proxy and Debian's packages only (nothing from release
# sites, no image pulled):
#
#   containerd, ctr, containerd-shim-runc-v2  github.com/containerd/containerd/v2, static
#   runc                                     github.com/opencontainers/runc, cgo with libseccomp
#   CNI plugins bridge, host-local, loopback github.com/containernetworking/plugins, static
#   pause                                    a static sandbox process (tools/realnode/pause)
#   a Debian root filesystem                 debootstrap from Debian's packages, as a tarball
#
# kubelet, kube-proxy and the control plane come from provision-assets.sh. Each part is built
# once and marked complete with a file written last, as provision-assets.sh does.
#
# Output (stdout, one per line, for eval):
#   MAGOS_NODE_BIN=<dir holding containerd, ctr, containerd-shim-runc-v2, runc, pause>
#   MAGOS_CNI_BIN=<dir holding the CNI plugins>
#   MAGOS_NODE_ROOTFS=<the Debian root filesystem tarball>
# Progress goes to stderr, a few lines as provision-assets.sh writes them; what the go commands
# and debootstrap print goes to $MAGOS_ASSETS_DIR/logs/node-<time>.log (tools/assets-lib.sh).
# Needs root (debootstrap), gcc and Debian's libseccomp-dev (for runc): `tools/prereqs.sh
# test-real` says what is missing and how to install it.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.3}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.10.0}
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the node runs besides our binaries: iptables for kube-proxy and the bridge CNI's
# masquerade, openssl for the node's certificates, conntrack for kube-proxy.
NODE_PACKAGES=iptables,iproute2,ca-certificates,libseccomp2,procps,conntrack,openssl,kmod
ASSETS=${MAGOS_ASSETS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/magos/assets}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
mkdir -p "$ASSETS"

LOG_PREFIX=node
source "$(dirname "$0")/assets-lib.sh"

exec 8>"$ASSETS/.node-lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 8; then
  log "waiting for another build of the node's parts to finish (lock: $ASSETS/.node-lock)"
  flock 8
fi

# The steps (tools/assets-lib.sh's run_steps): what each is called, about how long it takes on a
# fresh machine, and when it is done.
STEP_LABEL[rootfs]="a Debian $DEBIAN_SUITE root filesystem (debootstrap)"
STEP_SECONDS[rootfs]=60
rootfs_done() { [[ -f "$ASSETS/node-rootfs-$DEBIAN_SUITE/.complete" ]]; }
STEP_LABEL[containerd]="containerd $CONTAINERD_VERSION"
STEP_SECONDS[containerd]=180
containerd_done() { [[ -f "$ASSETS/containerd-$CONTAINERD_VERSION/.complete" ]]; }
STEP_LABEL[runc]="runc $RUNC_VERSION (cgo, libseccomp)"
STEP_SECONDS[runc]=60
runc_done() { [[ -f "$ASSETS/runc-$RUNC_VERSION/.complete" ]]; }
STEP_LABEL[cni]="the CNI plugins $CNI_PLUGINS_VERSION"
STEP_SECONDS[cni]=20
cni_done() { [[ -f "$ASSETS/cni-plugins-$CNI_PLUGINS_VERSION/.complete" ]]; }

build_containerd() {
  local out="$ASSETS/containerd-$CONTAINERD_VERSION" mod="$ASSETS/build-node/containerd-$CONTAINERD_VERSION"
  new_module "$mod" magos.local/node
  local m=github.com/containerd/containerd/v2 tags='urfave_cli_no_docs osusergo netgo static_build'
  (cd "$mod" && step_run go get -tool "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION" \
      "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" && export CGO_ENABLED=0 &&
    step_run go build -trimpath -tags "$tags" -ldflags='-s -w' -o "$out/" "$m/cmd/containerd" "$m/cmd/ctr" &&
    step_run go build -trimpath -tags "$tags no_grpc" -ldflags='-s -w' -o "$out/" "$m/cmd/containerd-shim-runc-v2")
  mark_complete "$out"
}

build_runc() {
  local out="$ASSETS/runc-$RUNC_VERSION" mod="$ASSETS/build-node/runc-$RUNC_VERSION"
  if ! [[ -f /usr/include/seccomp.h ]]; then
    log "runc needs libseccomp's headers: apt-get install libseccomp-dev"
    exit 1
  fi
  new_module "$mod" magos.local/node
  # Without runc's default libpathrs tag: that one needs a Rust library.
  (cd "$mod" && step_run go get -tool "github.com/opencontainers/runc@$RUNC_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" && export CGO_ENABLED=1 &&
    step_run go build -trimpath -tags 'seccomp urfave_cli_no_docs' -ldflags='-s -w' -o "$out/runc" github.com/opencontainers/runc)
  mark_complete "$out"
}

build_cni() {
  local out="$ASSETS/cni-plugins-$CNI_PLUGINS_VERSION" mod="$ASSETS/build-node/cni-$CNI_PLUGINS_VERSION"
  new_module "$mod" magos.local/node
  local m=github.com/containernetworking/plugins/plugins
  (cd "$mod" && step_run go get -tool "$m/main/bridge@$CNI_PLUGINS_VERSION" "$m/main/loopback@$CNI_PLUGINS_VERSION" \
      "$m/ipam/host-local@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" && export CGO_ENABLED=0 &&
    step_run go build -trimpath -ldflags='-s -w' -o "$out/" "$m/main/bridge" "$m/main/loopback" "$m/ipam/host-local" "$m/meta/portmap")
  mark_complete "$out"
}

build_rootfs() {
  local out="$ASSETS/node-rootfs-$DEBIAN_SUITE" dir="$ASSETS/build-node/rootfs-$DEBIAN_SUITE"
  rm -rf "$dir" "$out" && mkdir -p "$dir" "$out"
  step_run debootstrap --variant=minbase --include="$NODE_PACKAGES" "$DEBIAN_SUITE" "$dir" "$DEBIAN_MIRROR"
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -cf "$out/rootfs.tar" .
  rm -rf "$dir"
  mark_complete "$out"
}

build_pause() {
  # The pause binary is ours (tools/realnode/pause), so it is rebuilt every time: a second.
  local out="$ASSETS/node-bin-$CONTAINERD_VERSION-$RUNC_VERSION"
  mkdir -p "$out"
  # Its output is shown only when it fails (it may download modules on a first run).
  local output
  output=$(cd "$ROOT/tools/realnode" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/pause" ./pause 2>&1) ||
    { log "building the pause binary failed:" && printf '%s\n' "$output" >&2 && exit 1; }
  for b in containerd ctr containerd-shim-runc-v2; do ln -sfn "$ASSETS/containerd-$CONTAINERD_VERSION/$b" "$out/$b"; done
  ln -sfn "$ASSETS/runc-$RUNC_VERSION/runc" "$out/runc"
}

run_steps rootfs containerd runc cni
build_pause
rm -rf "$ASSETS/build-node"

echo "MAGOS_NODE_BIN=$ASSETS/node-bin-$CONTAINERD_VERSION-$RUNC_VERSION"
echo "MAGOS_CNI_BIN=$ASSETS/cni-plugins-$CNI_PLUGINS_VERSION"
echo "MAGOS_NODE_ROOTFS=$ASSETS/node-rootfs-$DEBIAN_SUITE/rootfs.tar"
