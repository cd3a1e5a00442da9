#!/usr/bin/env bash
# image-context.sh DIR GOARCH LDFLAGS lays out in DIR the build context of the images for
# linux/GOARCH, as the Dockerfile's COPY lines read it: bin/ (magos-hub, magosctl and
# magos-agent, static, built with LDFLAGS; OpenTofu), providers/ (the runner's provider mirror)
# and rootfs/ (passwd and group with the non-root user 65532, an empty /tmp, the host's CA
# certificates when it has them). OpenTofu and the providers come from tools/provision-assets.sh
# for that GOARCH. `make images` builds the host's context with it, `make release` one per
# platform of the release.
set -euo pipefail
dir=$1 arch=$2 ldflags=${3:-}
here=$(dirname "$0")

tofu=$(GOOS=linux GOARCH=$arch MAGOS_ASSETS_ONLY=tofu "$here/provision-assets.sh" | sed -n 's/^MAGOS_TOFU=//p')
providers=$(GOOS=linux GOARCH=$arch MAGOS_ASSETS_ONLY=providers "$here/provision-assets.sh" | sed -n 's/^MAGOS_PROVIDERS=//p')
[[ -x $tofu && -d $providers ]] || { echo "image-context: no OpenTofu or providers for linux/$arch" >&2; exit 1; }

rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/rootfs/etc" "$dir/rootfs/tmp"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w $ldflags" -o "$dir/bin/" \
  ./hub/cmd/magos-hub ./hub/cmd/magosctl ./agent/cmd/magos-agent
cp "$tofu" "$dir/bin/tofu"
cp -r "$providers" "$dir/providers" && rm -f "$dir/providers/.complete"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n' >"$dir/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/rootfs/etc/group"
chmod 1777 "$dir/rootfs/tmp"
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "$dir/rootfs/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$dir/rootfs/etc/ssl/certs/"
else
  echo "image-context: no /etc/ssl/certs/ca-certificates.crt on this machine: the images carry no CA certificates" >&2
fi
