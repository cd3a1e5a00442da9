#!/usr/bin/env bash
# provision-assets.sh builds the binaries the integration tests and the local fleet need
# (etcd, kube-apiserver, kube-controller-manager, kubectl, OpenTofu and the providers the runner
# image carries) from the Go module proxy, into a versioned cache outside the checkout. Nothing
# is downloaded from release sites or provider registries.
#
# Each tool is built once into $MAGOS_ASSETS_DIR/<tool>-<version>/ and marked complete with a
# file written last, so a rerun costs well under a second and an interrupted build is redone.
#
# Output (stdout, one per line, ready for `eval` or a Makefile include):
#   KUBEBUILDER_ASSETS=<dir holding etcd, kube-apiserver, kube-controller-manager, kubectl>
#   MAGOS_TOFU=<path of the tofu binary>
#   MAGOS_PROVIDERS=<OpenTofu provider mirror folder (unpacked filesystem mirror layout)>
# Progress goes to stderr: a line per tool built, with about how long it takes and how long is
# left, and a line when it is done. What the go commands print goes to a log file per run,
# $MAGOS_ASSETS_DIR/logs/assets-<time>.log, which those lines name (tools/assets-lib.sh).
set -euo pipefail

ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
TOFU_VERSION=${TOFU_VERSION:-v1.10.6}
# The providers the runner image carries (docs/providers.md says why these two).
TIME_PROVIDER_VERSION=${TIME_PROVIDER_VERSION:-v0.14.2}
KUBECTL_PROVIDER_VERSION=${KUBECTL_PROVIDER_VERSION:-v1.19.0}
# GOOS/GOARCH of another platform (GOARCH=arm64 MAGOS_ASSETS_ONLY=tofu, for the release's
# images) build for it into a cache folder of its own, assets-<os>-<arch>; the host's stays assets.
PLATFORM_DIR=""
if [[ -n ${GOOS:-}${GOARCH:-} ]]; then
  read -r GOOS_ GOARCH_ HOSTOS_ HOSTARCH_ <<<"$(GOFLAGS= go env GOOS GOARCH GOHOSTOS GOHOSTARCH | paste -sd' ')"
  [[ $GOOS_/$GOARCH_ == "$HOSTOS_/$HOSTARCH_" ]] || PLATFORM_DIR="-$GOOS_-$GOARCH_"
fi
ASSETS=${MAGOS_ASSETS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/magos/assets$PLATFORM_DIR}

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
mkdir -p "$ASSETS"

LOG_PREFIX=assets
source "$(dirname "$0")/assets-lib.sh"

# Only one build at a time (tests, make and the dev environment may all ask at once).
exec 9>"$ASSETS/.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
  log "waiting for another build of the assets to finish (lock: $ASSETS/.lock)"
  flock 9
fi

# The steps (tools/assets-lib.sh's run_steps): what each is called, about how long it takes on a
# fresh machine (2 cores, empty module cache), and when it is done.
STEP_LABEL[etcd]="etcd $ETCD_VERSION"
STEP_SECONDS[etcd]=75
etcd_done() { [[ -f "$ASSETS/etcd-$ETCD_VERSION/.complete" ]]; }
STEP_LABEL[kube]="kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl $KUBE_VERSION"
STEP_SECONDS[kube]=540
# kubelet, kube-scheduler and kube-proxy joined later: a cache without them is rebuilt.
kube_done() { [[ -f "$ASSETS/kube-$KUBE_VERSION/.complete" && -x "$ASSETS/kube-$KUBE_VERSION/kubelet" ]]; }
STEP_LABEL[tofu]="OpenTofu $TOFU_VERSION"
STEP_SECONDS[tofu]=210
tofu_done() { [[ -f "$ASSETS/tofu-$TOFU_VERSION/.complete" ]]; }

build_etcd() {
  local out="$ASSETS/etcd-$ETCD_VERSION" mod="$ASSETS/build/etcd-$ETCD_VERSION"
  new_module "$mod" magos.local/assets
  (cd "$mod" && step_run go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" &&
    step_run go build -trimpath -ldflags='-s -w' -o "$out/etcd" go.etcd.io/etcd/server/v3)
  mark_complete "$out"
}

build_kube() {
  local out="$ASSETS/kube-$KUBE_VERSION" mod="$ASSETS/build/kube-$KUBE_VERSION" gomod minor staging
  new_module "$mod" magos.local/assets
  # k8s.io/kubernetes pins its staging modules at v0.0.0 with replace => ./staging/...; point
  # every one of them at its published twin (v1.X.Y -> v0.X.Y).
  gomod=$(cd "$mod" && step_output go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod" | sort -u)
  [[ -n "$staging" ]] || { log "no staging modules found in $gomod"; exit 1; }
  minor=${KUBE_VERSION#v1.}
  mkdir -p "$mod/stub/sample-apiserver"
  printf 'module k8s.io/sample-apiserver\n\ngo 1.26\n' >"$mod/stub/sample-apiserver/go.mod"
  {
    printf '\nrequire k8s.io/kubernetes %s\n\n' "$KUBE_VERSION"
    for m in $staging; do
      if [[ $m == k8s.io/sample-apiserver ]]; then
        printf 'replace %s => ./stub/sample-apiserver\n' "$m"
      else
        printf 'replace %s => %s v0.%s\n' "$m" "$m" "$minor"
      fi
    done
  } >>"$mod/go.mod"
  local stamp="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*}"
    stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod" &&
    step_run go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" \
      "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBE_VERSION" \
      "k8s.io/kubernetes/cmd/kubectl@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$KUBE_VERSION" \
      "k8s.io/kubernetes/cmd/kube-proxy@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kubelet@$KUBE_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" &&
    step_run go build -trimpath -ldflags="-s -w$stamp" -o "$out/" k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubelet)
  mark_complete "$out"
}

build_tofu() {
  local out="$ASSETS/tofu-$TOFU_VERSION" mod="$ASSETS/build/tofu-$TOFU_VERSION"
  new_module "$mod" magos.local/assets
  # OpenTofu replaces hcl with its own fork; replace directives of a dependency are ignored, so
  # carry them over into the throwaway module.
  local gomod
  gomod=$(cd "$mod" && step_output go mod download -json "github.com/opentofu/opentofu@$TOFU_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  grep -E '^replace [^(]' "$gomod" >>"$mod/go.mod" || true
  (cd "$mod" && step_run go get -tool "github.com/opentofu/opentofu/cmd/tofu@$TOFU_VERSION" &&
    rm -rf "$out" && mkdir -p "$out" &&
    step_run go build -trimpath -ldflags='-s -w -X github.com/opentofu/opentofu/version.dev=no' -o "$out/tofu" github.com/opentofu/opentofu/cmd/tofu)
  mark_complete "$out"
}

# The provider mirror: OpenTofu's unpacked filesystem mirror layout,
# <host>/<namespace>/<type>/<version>/<os>_<arch>/terraform-provider-<type>_v<version>.
PROVIDERS="$ASSETS/providers-time-$TIME_PROVIDER_VERSION-kubectl-$KUBECTL_PROVIDER_VERSION"
STEP_LABEL[providers]="the providers hashicorp/time $TIME_PROVIDER_VERSION and gavinbunney/kubectl $KUBECTL_PROVIDER_VERSION"
STEP_SECONDS[providers]=180
providers_done() { [[ -f "$PROVIDERS/.complete" ]]; }

build_providers() {
  rm -rf "$PROVIDERS"
  build_provider hashicorp time github.com/hashicorp/terraform-provider-time "$TIME_PROVIDER_VERSION"
  build_provider gavinbunney kubectl github.com/gavinbunney/terraform-provider-kubectl "$KUBECTL_PROVIDER_VERSION"
  mark_complete "$PROVIDERS"
}

# build_provider NAMESPACE TYPE MODULE VERSION builds the provider MODULE@VERSION (its main
# package is the module's root) into the mirror as registry.opentofu.org/NAMESPACE/TYPE.
build_provider() {
  local ns=$1 type=$2 module=$3 version=$4 mod dir
  mod="$ASSETS/build/provider-$type-$version"
  dir="$PROVIDERS/registry.opentofu.org/$ns/$type/${version#v}/$(go env GOOS)_$(go env GOARCH)"
  new_module "$mod" magos.local/assets
  (cd "$mod" && step_run go get -tool "$module@$version" && mkdir -p "$dir" &&
    step_run go build -trimpath -ldflags='-s -w' -o "$dir/terraform-provider-${type}_$version" "$module")
}

# MAGOS_ASSETS_ONLY=tofu builds only OpenTofu and prints only MAGOS_TOFU; =providers builds only
# the provider mirror and prints only MAGOS_PROVIDERS (for an image of another GOOS/GOARCH, set
# them and MAGOS_ASSETS_DIR).
case ${MAGOS_ASSETS_ONLY:-} in
tofu)
  run_steps tofu
  echo "MAGOS_TOFU=$ASSETS/tofu-$TOFU_VERSION/tofu"
  exit 0
  ;;
providers)
  run_steps providers
  echo "MAGOS_PROVIDERS=$PROVIDERS"
  exit 0
  ;;
"") ;;
*)
  log "MAGOS_ASSETS_ONLY=$MAGOS_ASSETS_ONLY: want tofu, providers or nothing"
  exit 1
  ;;
esac

run_steps etcd tofu providers kube

# One folder in the layout envtest expects (KUBEBUILDER_ASSETS).
bin="$ASSETS/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$bin"
ln -sfn "$ASSETS/etcd-$ETCD_VERSION/etcd" "$bin/etcd"
for b in kube-apiserver kube-controller-manager kubectl; do
  ln -sfn "$ASSETS/kube-$KUBE_VERSION/$b" "$bin/$b"
done
rm -rf "$ASSETS/build"

echo "KUBEBUILDER_ASSETS=$bin"
echo "MAGOS_TOFU=$ASSETS/tofu-$TOFU_VERSION/tofu"
echo "MAGOS_PROVIDERS=$PROVIDERS"
