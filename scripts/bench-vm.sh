#!/usr/bin/env bash
# Machines benchmark: image build time (empty store; cold and warm .deb cache), boot-to-ssh
# time of one VM and of two VMs started together, and the memory (RSS) of each QEMU.
#
#   ./scripts/bench-vm.sh            # after ./scripts/setup; needs root
#
# Prints a markdown table for docs/benchmarks.md. Uses its own stores and cache under
# target/bench-vm, and destroys its VMs at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
envc=$PWD/target/release/envc
[ -x "$envc" ] || cargo build --release --locked --quiet
work=$PWD/target/bench-vm
rm -rf "$work"
mkdir -p "$work"
export ENVC_DEB_CACHE=$work/cache

cat >"$work/one.env" <<'EOF'
import "std/debian"
let vm0 = debian.machine("bench-0", memory = 512MiB)
EOF
cat >"$work/two.env" <<'EOF'
import "std/debian"
let vms = [for i in 0..2 => debian.machine("pair-${i}", memory = 512MiB)]
EOF

# Milliseconds a node took, from `build --json` lines.
took() { # FILE KEY
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("node") == sys.argv[2] and e.get("outcome") == "ok":
        print(e["duration_ms"])' "$1" "$2"
}
rss_mib() { # VM_DIR
    awk '/^VmRSS/ {printf "%d", $2 / 1024}' "/proc/$(cat "$1/qemu.pid")/status"
}

echo "bench-vm: image, cold cache" >&2
ENVC_STORE=$work/store-cold "$envc" build --json "$work/one.env" >"$work/cold.json"
echo "bench-vm: image, warm cache; one VM" >&2
ENVC_STORE=$work/store-warm "$envc" build --json "$work/one.env" >"$work/warm.json"
rss_one=$(rss_mib "$work/store-warm/machines/one/bench-0")
echo "bench-vm: two VMs together" >&2
ENVC_STORE=$work/store-warm "$envc" build --json "$work/two.env" >"$work/two.json"
rss_pair=$(rss_mib "$work/store-warm/machines/two/pair-0")
echo "bench-vm: no-op rebuild" >&2
t0=$(date +%s%N)
ENVC_STORE=$work/store-warm "$envc" build "$work/two.env" >/dev/null
noop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))

# The largest object of the store is the disk image.
disk=$(du -m --apparent-size "$work"/store-warm/objects/*/* | sort -n | tail -1 | cut -f1)
disk_used=$(du -m "$work"/store-warm/objects/*/* | sort -n | tail -1 | cut -f1)

cat <<EOF
| what | measured |
|---|---:|
| image build, empty store, empty package cache | $(( $(took "$work/cold.json" image:debian-12) / 1000 )) s |
| image build, empty store, warm package cache | $(( $(took "$work/warm.json" image:debian-12) / 1000 )) s |
| disk image size (apparent / on disk) | ${disk} MiB / ${disk_used} MiB |
| one VM: QEMU start to ssh ready | $(( $(took "$work/warm.json" vm:bench-0) / 1000 )) s |
| two VMs started together: each to ssh ready | $(( $(took "$work/two.json" vm:pair-0) / 1000 )) s, $(( $(took "$work/two.json" vm:pair-1) / 1000 )) s |
| QEMU RSS after boot, one VM alone / one of two | ${rss_one} MiB / ${rss_pair} MiB |
| no-op rebuild of the two VMs (reattach) | ${noop_ms} ms |
EOF

for f in one two; do
    ENVC_STORE=$work/store-warm "$envc" destroy --yes "$work/$f.env" >/dev/null
done
ENVC_STORE=$work/store-cold "$envc" destroy --yes "$work/one.env" >/dev/null
