#!/usr/bin/env bash
# End-to-end benchmark of `envc graph --format json` on generated projects.
#
#   scripts/bench-graph.sh [SIZES...]        default: 100x100 100x300 100x1000
#
# Builds release, generates each HOSTSxNODES_PER_HOST project with the `gen_env` example
# (HOSTS * NODES_PER_HOST graph nodes), checks the node count, then measures wall time
# (hyperfine, or a loop over /usr/bin/time when hyperfine is unavailable) and max RSS
# (`/usr/bin/time -v`). Prints a Markdown table; raw results go to $OUT (default
# target/bench-graph). Installs hyperfine and GNU time with apt if missing. Idempotent:
# re-running regenerates the inputs and overwrites the results.
#
# Environment: RUNS (timed runs per size, default 10), WARMUP (default 2), OUT,
# NO_HYPERFINE=1 (time with the /usr/bin/time loop even when hyperfine is installed).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/target/bench-graph}
RUNS=${RUNS:-10}
WARMUP=${WARMUP:-2}
if [ "$#" -gt 0 ]; then SIZES=("$@"); else SIZES=(100x100 100x300 100x1000); fi

log() { printf '%s\n' "$*" >&2; }

# --- tools ----------------------------------------------------------------------------
need=()
[ -x /usr/bin/time ] || need+=(time)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing: ${need[*]}"
    apt-get update -qq >/dev/null || true
    for p in "${need[@]}"; do
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null ||
        log "warning: could not install $p"
    done
  else
    log "warning: missing ${need[*]} and cannot apt-get install them"
  fi
fi
[ -x /usr/bin/time ] || { log "error: GNU time (/usr/bin/time) is required"; exit 1; }
command -v python3 >/dev/null 2>&1 || { log "error: python3 is required"; exit 1; }
HYPERFINE=$(command -v hyperfine || true)
[ "${NO_HYPERFINE:-}" = 1 ] && HYPERFINE=

# --- build ----------------------------------------------------------------------------
log "building release"
cargo build --release -q --bin envc
cargo build --release -q -p envc-compiler --example gen_env
ENVC=$ROOT/target/release/envc
GEN=$ROOT/target/release/examples/gen_env
mkdir -p "$OUT"

# --- measure --------------------------------------------------------------------------
{
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release && echo "$PRETTY_NAME"), $(rustc --version)"
  echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "timer: ${HYPERFINE:-/usr/bin/time loop}, $RUNS runs, $WARMUP warm-up"
} | tee "$OUT/machine.txt" >&2

rows=()
for size in "${SIZES[@]}"; do
  hosts=${size%x*}
  per_host=${size#*x}
  dir=$OUT/gen-$size
  rm -rf "$dir"
  "$GEN" "$hosts" "$per_host" "$dir" 2>/dev/null
  main=$dir/main.env
  nodes=$("$ENVC" graph --format json "$main" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["nodes"]))')
  [ "$nodes" -eq $((hosts * per_host)) ] ||
    { log "error: $size gave $nodes nodes, expected $((hosts * per_host))"; exit 1; }
  log "$size: $nodes nodes, $(wc -c <"$main") bytes of source"

  # Wall time: mean and standard deviation in seconds.
  if [ -n "$HYPERFINE" ]; then
    "$HYPERFINE" -N --warmup "$WARMUP" --runs "$RUNS" --style none \
      --export-json "$OUT/hyperfine-$size.json" \
      "$ENVC graph --format json $main" >/dev/null 2>&1 ||
      "$HYPERFINE" --warmup "$WARMUP" --runs "$RUNS" --style none \
        --export-json "$OUT/hyperfine-$size.json" \
        "$ENVC graph --format json $main >/dev/null" >/dev/null
    read -r mean sd cpu < <(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(r["mean"], r["stddev"] or 0, r["user"] + r["system"])' "$OUT/hyperfine-$size.json")
  else
    for _ in $(seq "$WARMUP"); do "$ENVC" graph --format json "$main" >/dev/null; done
    : >"$OUT/times-$size.txt"
    for _ in $(seq "$RUNS"); do
      /usr/bin/time -f '%e %U %S' -a -o "$OUT/times-$size.txt" "$ENVC" graph --format json "$main" >/dev/null
    done
    read -r mean sd cpu < <(python3 -c 'import statistics, sys
rows = [[float(x) for x in l.split()] for l in open(sys.argv[1]) if l.strip()]
xs = [r[0] for r in rows]
print(statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0, statistics.mean(r[1] + r[2] for r in rows))' "$OUT/times-$size.txt")
  fi

  # Max RSS: the largest of 3 runs, in MB (10^6 bytes; /usr/bin/time reports KiB).
  rss_kb=0
  for _ in 1 2 3; do
    /usr/bin/time -v -o "$OUT/time-v-$size.txt" "$ENVC" graph --format json "$main" >/dev/null
    k=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/time-v-$size.txt")
    [ "$k" -gt "$rss_kb" ] && rss_kb=$k
  done
  rows+=("$(python3 -c 'import sys
nodes, mean, sd, kb, cpu = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[6])
print(f"| {sys.argv[5]} | {nodes:,} | {mean*1000:.0f} ± {sd*1000:.0f} ms | {cpu*1000:.0f} ms | {kb*1024/1e6:.0f} MB | {mean*1e6/nodes:.1f} µs | {kb*1024/nodes/1e3:.1f} kB |")' \
    "$nodes" "$mean" "$sd" "$rss_kb" "$size" "$cpu")")
done

{
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| hosts x nodes/host | nodes | wall time (mean ± σ) | CPU time (user+sys, mean) | max RSS | wall/node | RSS/node |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/results.md"
