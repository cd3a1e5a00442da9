#!/usr/bin/env bash
# tools/upgrade-from.sh [REF] names the release `make test-upgrade` upgrades from, as shell
# assignments on stdout:
#
#   MAGOS_UPGRADE_FROM_VERSION=v0.1.0      (the release, or from-<short sha> for a plain ref)
#   MAGOS_UPGRADE_FROM_COMMIT=<40 hex>
#   MAGOS_UPGRADE_FROM_HOW='...'           (how it was chosen, for the log)
#
# Without REF it is the previous release: the newest vX.Y.Z tag that is an ancestor of HEAD and
# is not HEAD's own version (the VERSION file, or a tag on HEAD itself); where git has no such
# tag (a CI clone may have none), the newest "## vX.Y.Z - <date> (commit <sha>)" heading of
# CHANGELOG.md that is not HEAD's own version. With REF (any git ref: a tag, a branch, a commit)
# it is that commit, for development. The commit must be in this clone; a shallow clone
# fetches it from origin.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "upgrade-from: $*" >&2; exit 1; }
semver='^v[0-9]+\.[0-9]+\.[0-9]+$'

# ensure_commit SHA: the commit is in this clone, fetched from origin when it is not.
ensure_commit() {
  git cat-file -e "$1^{commit}" 2>/dev/null && return
  echo "upgrade-from: commit $1 is not in this clone; fetching it from origin" >&2
  git fetch -q --depth=1 origin "$1" >&2 || die "commit $1 is not in this clone and could not be fetched from origin"
  git cat-file -e "$1^{commit}" 2>/dev/null || die "commit $1 is not in this clone after fetching it"
}

emit() { # VERSION COMMIT HOW
  printf 'MAGOS_UPGRADE_FROM_VERSION=%s\nMAGOS_UPGRADE_FROM_COMMIT=%s\nMAGOS_UPGRADE_FROM_HOW=%q\n' "$1" "$2" "$3"
}

head_commit=$(git rev-parse HEAD)

if [[ $# -gt 0 && -n "$1" ]]; then
  ref=$1
  commit=$(git rev-parse --verify -q "$ref^{commit}") || { ensure_commit "$ref"; commit=$(git rev-parse "$ref^{commit}"); }
  [[ "$commit" != "$head_commit" ]] || die "UPGRADE_FROM=$ref is HEAD itself: nothing to upgrade from"
  version=""
  if [[ "$ref" =~ $semver ]] && [[ "$(git rev-parse -q --verify "refs/tags/$ref^{commit}" || true)" == "$commit" ]]; then
    version=$ref
  fi
  emit "${version:-from-${commit:0:12}}" "$commit" "UPGRADE_FROM=$ref"
  exit 0
fi

# HEAD's own version: the VERSION file (v0.2.0-dev between releases, v0.2.0 on a release) and
# any release tag on HEAD itself.
own=""
[[ -f VERSION ]] && own=$(tr -d '[:space:]' <VERSION)
head_tags=$(git tag --points-at HEAD --list 'v*' || true)
is_own() { [[ "$1" == "$own" ]] || grep -qxF "$1" <<<"$head_tags"; }

# 1. The newest release tag that is an ancestor of HEAD.
for tag in $(git tag --merged HEAD --list 'v*' --sort=-v:refname); do
  [[ "$tag" =~ $semver ]] || continue
  is_own "$tag" && continue
  commit=$(git rev-parse "$tag^{commit}")
  [[ "$commit" == "$head_commit" ]] && continue
  emit "$tag" "$commit" "the newest release tag before HEAD ($own): $tag"
  exit 0
done

# 2. The newest release CHANGELOG.md records with its commit.
if [[ -f CHANGELOG.md ]]; then
  best="" best_commit=""
  while read -r tag commit; do
    is_own "$tag" && continue
    [[ "$commit" == "$head_commit" ]] && continue
    if [[ -z "$best" ]] || [[ "$(printf '%s\n%s\n' "$best" "$tag" | sort -V | tail -1)" == "$tag" ]]; then
      best=$tag best_commit=$commit
    fi
  done < <(sed -nE 's/^## (v[0-9]+\.[0-9]+\.[0-9]+) .*\(commit ([0-9a-f]{40})\).*$/\1 \2/p' CHANGELOG.md)
  if [[ -n "$best" ]]; then
    ensure_commit "$best_commit"
    emit "$best" "$best_commit" "no release tag in this clone; CHANGELOG.md's newest release before HEAD ($own): $best"
    exit 0
  fi
fi

die "no previous release to upgrade from: no vX.Y.Z tag before HEAD ($own) and no '## vX.Y.Z - <date> (commit <sha>)' heading in CHANGELOG.md; name one with UPGRADE_FROM=<git ref>"
