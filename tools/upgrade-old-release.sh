#!/usr/bin/env bash
# tools/upgrade-old-release.sh OUT VERSION COMMIT builds the release `make test-upgrade`
# upgrades from, from its own tree: a throwaway `git worktree add --detach` of COMMIT under OUT
# runs that tree's own `make images IMAGE_TAG=VERSION` (so the images are that release's code,
# built the way it built them; the asset cache under ~/.cache/magos is shared), and its charts
# are copied out. The worktree is removed afterwards. It leaves:
#
#   OUT/images/magos-{hub,agent,runner}.tar   the images, tagged magos-*:VERSION
#   OUT/charts/magos-{hub,agent}               the release's charts
#   OUT/commit                                  COMMIT, once all of the above is complete
#
# and does nothing when OUT/commit already names COMMIT and the images are loaded in Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1 version=$2 commit=$3
log() { printf '[upgrade-from] %s\n' "$*" >&2; }

if [[ "$(cat "$out/commit" 2>/dev/null)" == "$commit" ]] &&
  docker image inspect "magos-hub:$version" "magos-agent:$version" "magos-runner:$version" >/dev/null 2>&1; then
  log "$version (commit ${commit:0:12}) already built in $out"
  exit 0
fi

rm -rf "$out" && mkdir -p "$out/images" "$out/charts"
src="$(cd "$out" && pwd)/src"
cleanup() { git worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"; git worktree prune; }
trap cleanup EXIT
git worktree add -q --detach "$src" "$commit"

# A release's tree stamps its own version when asked (VERSION=); an arbitrary ref keeps what
# its tree says.
stamp=()
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] && stamp=(VERSION="$version")
t0=$(date +%s)
log "building $version's images from commit ${commit:0:12} (its own make images; log in $out/images.log)"
if ! make -C "$src" images IMAGE_TAG="$version" "${stamp[@]}" >"$out/images.log" 2>&1; then
  tail -30 "$out/images.log" >&2
  log "make images of $version failed (log: $out/images.log)"
  exit 1
fi
for target in hub agent runner; do
  cp "$src/bin/images/magos-$target.tar" "$out/images/magos-$target.tar"
done
cp -r "$src/charts/magos-hub" "$src/charts/magos-agent" "$out/charts/"
echo "$commit" >"$out/commit"
log "$version built in $(($(date +%s) - t0))s: images magos-{hub,agent,runner}:$version, charts in $out/charts"
