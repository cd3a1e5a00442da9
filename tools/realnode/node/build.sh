#!/usr/bin/env bash
# build.sh builds the magos-node image (a whole single-node cluster per container, see
# entrypoint.sh) and the sandbox image every node loads, from the cached assets of
# tools/provision-assets.sh and tools/provision-node.sh:
#
#   magos-node:dev          the node
#   magos.local/pause:1     the Pods' sandbox, saved to $OUT/pause.tar for the nodes to load
#
# Usage: build.sh OUT_DIR. Prints MAGOS_NODE_IMAGE=magos-node:dev and MAGOS_PAUSE_TAR=<path>.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOLS=$(cd "$HERE/../.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
log() { printf '[node-image] %s\n' "$*" >&2; }

assets=$("$TOOLS/provision-assets.sh")
eval "$assets"
node=$("$TOOLS/provision-node.sh")
eval "$node"
t0=$(date +%s)

# The base layer changes only with the root filesystem: import it once per tarball.
base_id=$(cat "$(dirname "$MAGOS_NODE_ROOTFS")/.complete") # when the tarball was made
if [[ $(docker image inspect -f '{{index .Config.Labels "magos.rootfs"}}' magos-node-base 2>/dev/null) != "$base_id" ]]; then
  log "importing the Debian root filesystem"
  docker import -c "LABEL magos.rootfs=$base_id" "$MAGOS_NODE_ROOTFS" magos-node-base >/dev/null
fi

ctx="$OUT/node-context"
rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/cni"
for b in etcd kube-apiserver kube-controller-manager kubectl; do cp -L "$KUBEBUILDER_ASSETS/$b" "$ctx/bin/"; done
kube_dir=$(dirname "$(readlink -f "$KUBEBUILDER_ASSETS/kube-apiserver")")
for b in kube-scheduler kube-proxy kubelet; do cp -L "$kube_dir/$b" "$ctx/bin/"; done
for b in containerd ctr containerd-shim-runc-v2 runc; do cp -L "$MAGOS_NODE_BIN/$b" "$ctx/bin/"; done
cp -L "$MAGOS_CNI_BIN"/* "$ctx/cni/"
cp "$HERE/entrypoint.sh" "$ctx/"
docker build -q -t magos-node:dev -f "$HERE/Dockerfile" "$ctx" >/dev/null

# The sandbox image: the pause binary alone.
pctx="$OUT/pause-context"
rm -rf "$pctx" && mkdir -p "$pctx"
cp -L "$MAGOS_NODE_BIN/pause" "$pctx/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$pctx/Dockerfile"
docker build -q -t magos.local/pause:1 "$pctx" >/dev/null
docker save -o "$OUT/pause.tar" magos.local/pause:1
rm -rf "$ctx" "$pctx"
log "magos-node:dev $(docker image inspect -f '{{.Size}}' magos-node:dev | awk '{printf "%.0f MiB", $1/1048576}') built in $(($(date +%s) - t0))s"
echo "MAGOS_NODE_IMAGE=magos-node:dev"
echo "MAGOS_PAUSE_TAR=$OUT/pause.tar"
