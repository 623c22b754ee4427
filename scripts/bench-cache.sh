#!/usr/bin/env bash
# Shared cache and state benchmark, side by side in one run against moto's S3 server on
# loopback (scripts/s3-server): the quickstart's image built (empty store, warm .deb
# cache) and pushed, vs fetched from the cache into an empty store; a no-op build against
# the shared state; the peak memory (max RSS) of pushing and fetching the image, whose
# disk is a 2 GiB sparse file.
#
#   ./scripts/bench-cache.sh         # after ./scripts/setup; needs root
#
# Prints a markdown table for docs/benchmarks.md. Works under target/bench-cache.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
envc=$repo/target/release/envc
[ -x "$envc" ] || cargo build --release --locked --quiet
work=$repo/target/bench-cache
rm -rf "$work"
mkdir -p "$work"
export ENVC_DEB_CACHE=$repo/target/envc-cache

scripts/s3-server --port-file "$work/port" >"$work/s3.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
export AWS_ENDPOINT=http://127.0.0.1:$port AWS_ALLOW_HTTP=true
curl -fsS -X PUT "$AWS_ENDPOINT/bench" >/dev/null

public=$("$envc" key generate bench --out "$work" 2>/dev/null)
for m in laptop runner; do
    mkdir -p "$work/$m"
    printf 'import "std/debian"\noutput image = debian.default_image.digest\n' >"$work/$m/i.env"
    printf '[cache]\nurl = "s3://bench/cache"\ntrusted-public-keys = ["%s"]\n[state]\nurl = "s3://bench/state"\n' \
        "$public" >"$work/$m/envc.toml"
done

# Wall seconds and max RSS (MiB) of a command, as "SECONDS MIB".
measure() {
    python3 - "$@" <<'EOF'
import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if r.returncode != 0:
    sys.exit(f"{' '.join(sys.argv[1:])}: exit {r.returncode}\n{r.stderr.decode()[-2000:]}")
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{time.monotonic() - t:.2f} {rss:.0f}")
EOF
}

# Only locked images go through the cache.
"$envc" lock "$work/laptop/i.env" >/dev/null 2>&1
cp "$work/laptop/i.lock" "$work/runner/i.lock"

echo "bench-cache: laptop builds and pushes" >&2
read -r built built_rss < <(measure "$envc" build "$work/laptop/i.env" --signing-key "$work/bench.secret")
read -r pushed pushed_rss < <(measure "$envc" cache push "$work/laptop/i.env" --signing-key "$work/bench.secret")
echo "bench-cache: runner fetches" >&2
read -r fetched fetched_rss < <(measure "$envc" build "$work/runner/i.env")
noops=()
for _ in 1 2 3 4 5; do
    read -r s _ < <(measure "$envc" build "$work/runner/i.env")
    noops+=("$s")
done
noop=$(printf '%s\n' "${noops[@]}" | sort -n | sed -n 3p)
disk=$(du -sb --apparent-size "$work/runner/.envc/objects" | cut -f1)
used=$(du -sB1 "$work/runner/.envc/objects" | cut -f1)

cat <<EOF
| what (quickstart image, moto S3 on loopback) | time | peak RSS |
|---|---|---|
| built from Debian's archive, empty store, warm .deb cache | ${built} s | ${built_rss} MiB |
| pushed (\`envc cache push\`, every chunk new) | ${pushed} s | ${pushed_rss} MiB |
| fetched into an empty store by \`envc build\` | ${fetched} s | ${fetched_rss} MiB |
| no-op \`envc build\` against the shared state (median of 5) | ${noop} s | |

The fetched store holds $((disk >> 20)) MiB of objects (apparent size) in $((used >> 20)) MiB of disk: the 2 GiB disk image stays sparse.
EOF
