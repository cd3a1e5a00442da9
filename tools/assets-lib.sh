# assets-lib.sh: what tools/provision-assets.sh and tools/provision-node.sh share. Source it after
# setting ASSETS (the cache folder) and LOG_PREFIX.

log() { printf '[%s] %s\n' "$LOG_PREFIX" "$*" >&2; }

# new_module DIR NAME: an empty throwaway module named NAME to build a tool from.
new_module() {
  rm -rf "$1" && mkdir -p "$1"
  printf 'module %s\n\ngo 1.26\n' "$2" >"$1/go.mod"
}

# finish WHAT DIR START: mark DIR complete (a file written last) and report the time it took.
finish() {
  date -u +%FT%TZ >"$2/.complete"
  log "$1 ready in $(($(date +%s) - $3))s: $2"
}
