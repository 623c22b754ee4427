#!/usr/bin/env bash
# verify benchmark: `envc verify` of the quickstart (an image, two VMs, nginx on each, a
# config file listing both; locked) under TCG on a warm .deb cache, split into its parts:
# rebuild (the image built again and compared), lab boot (the longest VM boot of the lab),
# deploy (the rest of the lab's build), compare (probing production, its postconditions,
# the comparison) and teardown. Also: how long nginx took to install on a fresh VM in the
# production build (from the pinned .debs, with the controller's store warm or cold).
#
#   ./scripts/bench-verify.sh        # after ./scripts/setup; needs root
#
# Prints a markdown table for docs/benchmarks.md. Production lives in its own store under
# target/bench-verify and is destroyed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
envc=$PWD/target/release/envc
cargo build --release --locked --quiet
work=$PWD/target/bench-verify
rm -rf "$work"
mkdir -p "$work"
export ENVC_STORE=$work/store
# Warm: the tests' cache, or a first build here fills it.
export ENVC_DEB_CACHE=${ENVC_DEB_CACHE:-$PWD/target/envc-cache}
env_file=examples/quickstart.env
trap '"$envc" destroy --yes "$env_file" >/dev/null 2>&1 || true' EXIT

echo "bench-verify: building production" >&2
"$envc" build --json "$env_file" >"$work/build.json"
echo "bench-verify: verify" >&2
start=$(date +%s.%N)
set +e
"$envc" verify --json "$env_file" >"$work/verify.json" 2>"$work/verify.err"
code=$?
set -e
end=$(date +%s.%N)
[ "$code" = 0 ] || { cat "$work/verify.err" "$work/verify.json" >&2; echo "bench-verify: verify exited $code" >&2; exit 1; }
python3 - "$work/verify.json" "$start" "$end" "$work/build.json" <<'PY'
import json, sys
nginx = [json.loads(l) for l in open(sys.argv[4])]
nginx = [e["duration_ms"] / 1000 for e in nginx
         if e.get("node", "").endswith("/package:nginx") and e.get("outcome") == "ok"]
print(f"nginx on a fresh VM (production build, each of {len(nginx)}): "
      + ", ".join(f"{t:.1f} s" for t in nginx) + "\n")
summary = [json.loads(l)["summary"] for l in open(sys.argv[1]) if '"summary"' in l][0]
s = summary["seconds"]
total = float(sys.argv[3]) - float(sys.argv[2])
print("| part | seconds |")
print("|---|---|")
for k in ["rebuild", "lab_boot", "deploy", "compare", "teardown"]:
    print(f"| {k.replace('_', ' ')} | {s[k]:.1f} |")
print(f"| **total (wall)** | **{total:.1f}** |")
print(f"\n{summary['rebuilt']} image rebuilt ({summary['rebuilds_differing']} differing), "
      f"{summary['lab_nodes']} lab nodes compared ({summary['lab_nodes_differing']} differing)")
PY
