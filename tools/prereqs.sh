#!/usr/bin/env bash
# prereqs.sh TARGET checks, before make starts anything, that this machine has what `make TARGET`
# needs beyond Go, and says what is missing and the command that installs it:
#
#   test                     chromium (Debian's package) for the dashboard's browser test
#                            (TestDashboardInABrowser in tools/e2e/browser). Without it that test skips,
#                            so this only warns, unless MAGOS_CI is set (.ci/run sets it): then
#                            the test would fail, and so does this check.
#   test-real, demo-real,    debootstrap (the nodes' Debian root filesystem), gcc and
#   node-image               libseccomp-dev (runc is built with cgo against libseccomp), the
#                            docker CLI and a Docker daemon it reaches (the nodes are containers).
#
# Everything missing is reported at once, on stderr; the exit status is 1 when anything the
# target cannot do without is missing, else 0. stdout stays empty.
#
# prereqs.sh --missing-packages TARGET... prints the Debian packages the targets need that are
# missing, one a line, and nothing else (.ci/run installs them).
set -euo pipefail

missing=()  # Debian packages to install
problems=() # what a package does not fix
warn_only=false

# check TARGET adds what TARGET needs and this machine lacks to missing and problems.
check() {
  case $1 in
  test)
    command -v chromium >/dev/null || missing+=(chromium)
    [[ -n ${MAGOS_CI:-} ]] || warn_only=true
    ;;
  test-real | demo-real | node-image)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v gcc >/dev/null || missing+=(gcc)
    [[ -f /usr/include/seccomp.h ]] || missing+=(libseccomp-dev)
    if ! command -v docker >/dev/null; then
      missing+=(docker.io)
    elif ! out=$(docker version --format '{{.Server.Version}}' 2>&1); then
      problems+=("a Docker daemon the docker CLI reaches, and \`docker version\` says \"${out##*$'\n'}\". Start one (sudo systemctl start docker) or point DOCKER_HOST at it")
    fi
    ;;
  *)
    echo "prereqs.sh: unknown target '$1': want test, test-real, demo-real or node-image" >&2
    exit 2
    ;;
  esac
}

if [[ ${1:-} == --missing-packages ]]; then
  shift
  for t; do check "$t"; done
  if ((${#missing[@]})); then printf '%s\n' "${missing[@]}"; fi
  exit 0
fi

target=${1:-}
check "$target"

if ((${#missing[@]})); then
  sudo=""
  ((EUID == 0)) || sudo="sudo "
  install="${sudo}apt-get install -y ${missing[*]}"
  if $warn_only; then
    echo "make $target: Debian packages are missing: ${missing[*]}, so the dashboard's browser test (TestDashboardInABrowser) will skip. Install them with: $install" >&2
  else
    echo "make $target needs Debian packages that are missing: ${missing[*]}. Install them with: $install" >&2
  fi
fi
for p in "${problems[@]}"; do
  echo "make $target needs $p." >&2
done
if ((${#problems[@]})) || { ((${#missing[@]})) && ! $warn_only; }; then
  exit 1
fi
exit 0
