#!/usr/bin/env bash
# Machines benchmark: image build time (empty store; cold and warm .deb cache; locked, from
# its pinned .debs fetched into an empty store, and again from the store with no network),
# boot-to-ssh time of one VM and of two VMs started together, and the memory (RSS) of
# each QEMU.
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

# Locked: the same image built from its pinned .debs. First into an empty store (they are
# fetched from the lock's mirror), then into another store that has only those .debs, in a
# network namespace of its own (no route anywhere): built from the store alone.
echo "bench-vm: locked image, pinned .debs fetched, then from the store offline" >&2
printf 'import "std/debian"\noutput image = debian.default_image.digest\n' >"$work/image.env"
"$envc" lock "$work/image.env" >/dev/null
ENVC_STORE=$work/store-pinned "$envc" build --json "$work/image.env" >"$work/pinned.json"
mkdir -p "$work/store-offline"
cp -al "$work/store-pinned/debs" "$work/store-offline/debs"
ENVC_STORE=$work/store-offline unshare --net -- "$envc" build --json "$work/image.env" >"$work/offline.json"
digest() { ENVC_STORE=$1 "$envc" output "$work/image.env"; }
if [ "$(digest "$work/store-pinned")" = "$(digest "$work/store-offline")" ]; then
    same="the same disk"
else
    same="a DIFFERENT disk"
fi

cat <<EOF
| what | measured |
|---|---:|
| image build, empty store, empty package cache | $(( $(took "$work/cold.json" image:debian-12) / 1000 )) s |
| image build, empty store, warm package cache | $(( $(took "$work/warm.json" image:debian-12) / 1000 )) s |
| locked image build, empty store ($(ls "$work/store-pinned/debs" | wc -l) pinned .debs fetched) | $(( $(took "$work/pinned.json" image:debian-12) / 1000 )) s |
| locked image build from the store's .debs, no network | $(( $(took "$work/offline.json" image:debian-12) / 1000 )) s ($same) |
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
