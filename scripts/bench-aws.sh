#!/usr/bin/env bash
# EC2 machines benchmark (issue 36): 20 `aws.machine`s, each with a file and a package (jq),
# against moto's EC2 on loopback, with namespace test hosts standing in for the instances'
# boot. Each step is its own envc run: build (create + configure), build again (no-op),
# `plan`, `plan --refresh`, `destroy --yes`. For each: wall time, envc's CPU time and peak RSS, the EC2
# API calls envc made (counted by a proxy in front of moto), and the time the test's boot
# stand-in spent starting hosts while envc ran. The measurement is the ignored test
# `tests/aws_bench.rs`, which also asserts the basics (20 running after the build, each
# configured; the no-op runs nothing; `plan` asks EC2 nothing; the destroy leaves the account
# as it was).
#
#   ./scripts/bench-aws.sh [RUNS]     # after ./scripts/setup, as root; RUNS defaults to 3
#                                     # (under a minute each)
#
# Prints each run's table, then the median of each figure per step as a markdown table for
# docs/benchmarks.md. Raw output goes to target/bench-aws/. Run nothing else meanwhile: the
# figures are wall times on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
work=$PWD/target/bench-aws
rm -rf "$work"
mkdir -p "$work"

cargo test --release --locked --test integration --no-run --quiet
for i in $(seq 1 "$runs"); do
    echo "bench-aws: run $i of $runs" >&2
    cargo test --release --locked --quiet --test integration -- aws_bench:: --ignored --nocapture \
        >"$work/run-$i.txt" 2>&1 || { cat "$work/run-$i.txt"; exit 1; }
    grep -E '^(\||calls of)' "$work/run-$i.txt"
    echo
done

# BENCH lines: step, wall (s), CPU (s), peak RSS (KiB), EC2 calls, stand-in boot time (s).
cat "$work"/run-*.txt | grep '^BENCH' >"$work/bench.tsv"
python3 - "$work/bench.tsv" "$runs" <<'EOF'
import statistics, sys
steps = {}
for line in open(sys.argv[1]):
    _, step, wall, cpu, rss, calls, boot = line.rstrip("\n").split("\t")
    steps.setdefault(step, []).append((float(wall), float(cpu), int(rss), int(calls), float(boot)))
print(f"median of {sys.argv[2]} runs:\n")
print("| step (20 machines) | wall | CPU | peak RSS | EC2 calls | per machine | stand-in booting |")
print("|---|---|---|---|---|---|---|")
for step, rows in steps.items():
    wall, cpu, rss, calls, boot = (statistics.median(c) for c in zip(*rows))
    print(f"| {step} | {wall:.3f} s | {cpu:.2f} s | {rss / 1024:.1f} MiB | {calls:g} | {calls / 20:.1f} | {boot:.1f} s |")
EOF
