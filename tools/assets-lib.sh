# assets-lib.sh: what tools/provision-assets.sh and tools/provision-node.sh share. Source it after
# setting ASSETS (the cache folder) and LOG_PREFIX.
#
# The terminal (stderr) gets a few lines per run: one per step built, with about how long it
# takes and how long is left in all, and one when it is done. Everything the build commands print
# (go get's hundreds of "go: downloading" lines, compiler output) goes to one log file per run,
# $ASSETS/logs/$LOG_PREFIX-<time>.log, which those lines name. On a failure the log's last lines
# and its path are printed. A run with everything cached prints nothing and writes no log.

log() { printf '[%s] %s\n' "$LOG_PREFIX" "$*" >&2; }

# How many lines of the log a failure shows, and how many logs of one prefix are kept.
LOG_TAIL_LINES=${LOG_TAIL_LINES:-40}
LOGS_KEPT=10

# The steps' labels and durations (see run_steps).
declare -A STEP_LABEL=() STEP_SECONDS=()

# RUN_LOG is this run's log file, created by open_log on the first step that runs.
RUN_LOG=""

# open_log creates this run's log file (once) and removes the oldest logs of the same prefix.
open_log() {
  [[ -n $RUN_LOG ]] && return
  mkdir -p "$ASSETS/logs"
  RUN_LOG="$ASSETS/logs/$LOG_PREFIX-$(date -u +%Y%m%dT%H%M%SZ)-$$.log"
  : >"$RUN_LOG"
  local logs
  mapfile -t logs < <(ls -1t "$ASSETS/logs/$LOG_PREFIX"-*.log 2>/dev/null)
  ((${#logs[@]} <= LOGS_KEPT)) || rm -f "${logs[@]:LOGS_KEPT}"
}

# show_log_tail WHAT: tells the terminal WHAT failed, with the last lines of the log and its path.
show_log_tail() {
  log "$1 failed; the last $LOG_TAIL_LINES lines of its log:"
  tail -n "$LOG_TAIL_LINES" "$RUN_LOG" | sed 's/^/    /' >&2
  log "the whole log: $RUN_LOG"
}

# step_run CMD...: runs CMD with its output (stdout and stderr) appended to the run's log, never
# to the terminal. On a failure it shows the log's tail and returns CMD's status.
step_run() {
  open_log
  printf '\n$ (in %s) %s\n' "$PWD" "$*" >>"$RUN_LOG"
  local rc=0
  "$@" >>"$RUN_LOG" 2>&1 || rc=$?
  ((rc == 0)) || show_log_tail "$1 ${2:-}"
  return "$rc"
}

# step_output CMD...: runs CMD like step_run, but prints CMD's stdout (to capture it with $(...));
# only its stderr goes to the log.
step_output() {
  open_log
  printf '\n$ (in %s) %s\n' "$PWD" "$*" >>"$RUN_LOG"
  local rc=0
  "$@" 2>>"$RUN_LOG" || rc=$?
  ((rc == 0)) || show_log_tail "$1 ${2:-}"
  return "$rc"
}

# human SECONDS: a rough duration for people, "75 s" or "9 min".
human() {
  if (($1 < 120)); then printf '%d s' "$1"; else printf '%d min' $((($1 + 30) / 60)); fi
}

# run_steps STEP...: builds every STEP that is not done yet, in order. A STEP is a name with
#   STEP_done       a function that succeeds when its output is complete in the cache,
#   build_STEP      a function that builds it (running its commands through step_run),
#   STEP_LABEL[STEP]    what the terminal calls it ("etcd v3.6.16"),
#   STEP_SECONDS[STEP]  about how long it takes on a fresh machine (2 cores, cold module cache).
# The terminal gets one line per step built (which one, i of n, about how long it takes and how
# long is left in all, the log's path), then one line with the time it took.
run_steps() {
  local s todo=() left=0 i=0 t0 t00
  for s; do
    "${s}_done" || { todo+=("$s") && left=$((left + STEP_SECONDS[$s])); }
  done
  ((${#todo[@]})) || return 0
  open_log
  t00=$(date +%s)
  for s in "${todo[@]}"; do
    i=$((i + 1))
    printf '\n== %s: building %s\n' "$(date -u +%FT%TZ)" "${STEP_LABEL[$s]}" >>"$RUN_LOG"
    log "building ${STEP_LABEL[$s]} ($i of ${#todo[@]}, about $(human "${STEP_SECONDS[$s]}"); about $(human "$left") left in all; log: $RUN_LOG)"
    t0=$(date +%s)
    "build_$s"
    log "${STEP_LABEL[$s]} built in $(human $(($(date +%s) - t0)))"
    left=$((left - STEP_SECONDS[$s]))
  done
  ((${#todo[@]} == 1)) || log "all ${#todo[@]} built in $(human $(($(date +%s) - t00)))"
}

# new_module DIR NAME: an empty throwaway module named NAME to build a tool from.
new_module() {
  rm -rf "$1" && mkdir -p "$1"
  printf 'module %s\n\ngo 1.26\n' "$2" >"$1/go.mod"
}

# mark_complete DIR: marks DIR complete (a file written last; the STEP_done functions test it).
mark_complete() {
  date -u +%FT%TZ >"$1/.complete"
}
