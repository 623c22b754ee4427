#!/usr/bin/env bash
# Side-by-side benchmark of `envc build` against pyinfra and Ansible doing the same work on the
# same kind of hosts (docs/benchmarks.md):
#
#   scripts/bench-build.sh [TOOL...]          TOOL: envc, pyinfra, ansible (default: all three)
#
# Workload (scripts/bench/workload): HOSTS namespace hosts (scripts/bench/hosts) x (FILES files
# of ~1.1 KiB under /etc/bench + the packages hello, tree, jq). For each tool and each
# repetition: start HOSTS fresh hosts, then time with the wall clock
#   cold    the first run against clean hosts,
#   no-op   the same run again (nothing to do),
#   change  a run after one file per host changed (f00.conf gets a new revision),
# verifying after every run that every host holds exactly the expected files (content, mode,
# owner) and packages; then stop the hosts. On the change run it also counts what ran: envc's
# summary ("N ran, M cached, F failed"), pyinfra's changed operations, Ansible's changed tasks.
# Repetitions run in rounds, each tool once per round, so that a machine whose speed drifts
# during the invocation (a shared VM's does) moves every tool's numbers alike.
# Prints a Markdown table (median over the repetitions) with the machine's description, and
# envc's ratios to pyinfra of the medians and of each round, and writes it to
# $OUT/results.md; raw numbers go to $OUT/raw.tsv, each run's output to $OUT/logs/.
#
# Environment:
#   REPEAT=1        repetitions per tool (the table shows the median)
#   HOSTS=20 FILES=20
#   PACKAGES=auto   yes | no | auto (= yes when the rootfs has the local apt repository
#                   /srv/envc-repo that the packages come from)
#   OUT=target/bench
#   ENVC=target/release/envc   (built with `cargo build --release` first unless ENVC is set)
#   RUN_TIMEOUT=600 seconds per run before it is killed (and counted as failed)
#   ENVC_KEX=       when set (e.g. curve25519-sha256), the key exchange envc's ssh connections
#                   offer (KexAlgorithms in the ssh_config envc reads). Unset: OpenSSH's default
#                   (sntrup761x25519, post-quantum, about 70 ms of CPU per connection here);
#                   pyinfra's paramiko negotiates curve25519-sha256 whatever this says.
#   ENVC_BENCH_ROOTFS  the hosts' rootfs (default: what scripts/testhosts/build-rootfs prints)
# Needs root (namespaces), python3 >= 3.11 and PyPI through pip (scripts/bench/peers-setup).
# One invocation with the defaults takes about 9 minutes on 2 cores, 6 of them Ansible's.
# With packages, envc's are locked first (untimed) against the rootfs's repository served as
# an archive (scripts/testhosts/make-archive), so envc installs exactly the pinned .debs.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/target/bench}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPEAT=${REPEAT:-1}
HOSTS=${HOSTS:-20}
FILES=${FILES:-20}
PACKAGES=${PACKAGES:-auto}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
ENVC_KEX=${ENVC_KEX:-}
if [ "$#" -gt 0 ]; then TOOLS=("$@"); else TOOLS=(envc pyinfra ansible); fi
HOSTCTL=$ROOT/scripts/bench/hosts

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
now() { date +%s.%N; }

[ "$(id -u)" = 0 ] || die "must run as root (namespace hosts)"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer"
for t in "${TOOLS[@]}"; do
    case $t in envc | pyinfra | ansible) ;; *) die "unknown tool $t (envc, pyinfra, ansible)" ;; esac
done

# --- setup ----------------------------------------------------------------------------
rootfs=${ENVC_BENCH_ROOTFS:-$("$ROOT/scripts/testhosts/build-rootfs" | tail -n 1)}
export ENVC_BENCH_ROOTFS=$rootfs   # scripts/bench/hosts uses the same one
case $PACKAGES in
auto) if [ -d "$rootfs/srv/envc-repo" ]; then PACKAGES=yes; else PACKAGES=no
          log "warning: the rootfs $rootfs has no local apt repository (/srv/envc-repo):"
          log "         benchmarking the files only (PACKAGES=no)"; fi ;;
yes | no) ;;
*) die "PACKAGES must be yes, no or auto" ;;
esac
if [ "$PACKAGES" = yes ] && [[ " ${TOOLS[*]} " == *" ansible "* ]] &&
    ! [ -d "$rootfs/usr/lib/python3/dist-packages/apt" ]; then
    log "warning: the rootfs has no python3-apt: Ansible's apt module needs it on the target, so"
    log "         Ansible's package task will fail (add python3-apt to scripts/testhosts/build-rootfs)"
fi
wl_flags=(--hosts "$HOSTS" --files "$FILES")
[ "$PACKAGES" = yes ] || wl_flags+=(--no-packages)

VENV_BIN=""
for t in "${TOOLS[@]}"; do
    if [ "$t" != envc ]; then VENV_BIN=$("$ROOT/scripts/bench/peers-setup" | tail -n 1); break; fi
done

ENVC_OK=""
skip_envc=""
for t in "${TOOLS[@]}"; do
    [ "$t" = envc ] || continue
    if [ -z "${ENVC:-}" ]; then
        ENVC=$ROOT/target/release/envc
        log "building envc (release)"
        cargo build --release -q --bin envc >&2 || skip_envc="cargo build --release failed"
    fi
    if [ -z "$skip_envc" ]; then
        if ! [ -x "$ENVC" ]; then skip_envc="$ENVC does not exist"
        elif ! "$ENVC" build --help >/dev/null 2>&1; then skip_envc="\`envc build\` is not implemented in this envc ($ENVC build --help fails)"
        else ENVC_OK=1; fi
    fi
    [ -z "$skip_envc" ] || log "SKIPPING envc: $skip_envc"
done
# Even without `envc build`, bench.env is checked against the files the peers deploy.
[ -x "${ENVC:-$ROOT/target/release/envc}" ] && wl_flags+=(--envc "${ENVC:-$ROOT/target/release/envc}")

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# --- running --------------------------------------------------------------------------
H=$OUT/hosts           # scripts/bench/hosts state of the current repetition
RAW=$OUT/raw.tsv
rm -rf "$OUT/logs"; mkdir -p "$OUT/logs"
# Nothing is deleted while tools are timed: ext4 makes a file created within a minute of
# many deletions nearby wait while it skips their inodes (`recently_deleted`), which slowed each
# envc repetition after the first by 10-20% when the last one's store (a thousand files)
# was deleted just before, though no user deletes a store just before a cold run. Each
# repetition has its own work directory, and an earlier invocation's is moved aside here
# and deleted at the end. So are the hosts' files (their overlays: dpkg's thousands of
# files each): deleted between runs, they made the next cold run's dpkg, of either tool,
# and envc's store spend a sixth of the machine's CPU in that scan.
[ ! -e "$OUT/work" ] || mv "$OUT/work" "$OUT/old-work.$$"
mkdir -p "$OUT/work"
printf 'tool\trep\tphase\tseconds\trc\tverified\tchanged\n' >"$RAW"
ARCHIVE_PID=""
stop_archive() { [ -z "$ARCHIVE_PID" ] || { kill "$ARCHIVE_PID" 2>/dev/null || true; wait "$ARCHIVE_PID" 2>/dev/null || true; ARCHIVE_PID=""; }; }
trap 'stop_archive; "$HOSTCTL" down "$H" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

# The ssh_config envc reads: the hosts', with ENVC_KEX's key exchange first when it is set.
envc_ssh_config() {
    if [ -z "$ENVC_KEX" ]; then echo "$H/ssh_config"; return; fi
    printf 'KexAlgorithms %s\nInclude %s\n' "$ENVC_KEX" "$H/ssh_config" >"$OUT/envc_ssh_config"
    echo "$OUT/envc_ssh_config"
}

# run TOOL WORK: one run of TOOL inside the controller netns; output to $logf
run_tool() {
    local tool=$1 w=$2
    case $tool in
    envc)
        (cd "$w/envc" && ENVC_STORE=$w/envc/store ENVC_SSH_CONFIG=$(envc_ssh_config) \
            timeout -k 10 "$RUN_TIMEOUT" "$HOSTCTL" exec "$H" -- "$ENVC" build bench.env) ;;
    pyinfra)
        (cd "$w/pyinfra" && timeout -k 10 "$RUN_TIMEOUT" \
            "$HOSTCTL" exec "$H" -- "$VENV_BIN/pyinfra" -y inventory.py deploy.py) ;;
    ansible)
        (cd "$w/ansible" && HOME=$w/ansible/home ANSIBLE_HOME=$w/ansible/home \
            ANSIBLE_CONFIG=$w/ansible/ansible.cfg timeout -k 10 "$RUN_TIMEOUT" \
            "$HOSTCTL" exec "$H" -- "$VENV_BIN/ansible-playbook" site.yml) ;;
    esac
}

# envc's packages are locked, as a project commits its lockfile: against the rootfs's
# repository served as a Debian archive in the controller's network (untimed, before the cold
# run, which then fetches the pinned .debs into its empty store and ships them to the hosts;
# the peers install the same files from the hosts' local repository).
ARCHIVE=$OUT/archive
lock_envc() {
    local w=$1
    rm -rf "$ARCHIVE"
    "$ROOT/scripts/testhosts/make-archive" "$rootfs" "$ARCHIVE"
    "$HOSTCTL" exec "$H" -- python3 -m http.server 8765 --bind 127.0.0.1 --directory "$ARCHIVE" \
        >/dev/null 2>&1 &
    ARCHIVE_PID=$!
    for _ in $(seq 50); do
        "$HOSTCTL" exec "$H" -- bash -c 'exec 3<>/dev/tcp/127.0.0.1/8765' 2>/dev/null && break
        sleep 0.2
    done
    (cd "$w/envc" && ENVC_DEBIAN_MIRROR=http://127.0.0.1:8765 ENVC_ARCHIVE_KEYRING= \
        "$HOSTCTL" exec "$H" -- "$ENVC" lock bench.env) >"$OUT/logs/envc-lock.log" 2>&1 ||
        die "envc lock failed: $(tail -n 5 "$OUT/logs/envc-lock.log")"
}

# What the log of a run says changed (loosely parsed; "?" when it says nothing recognisable).
changed_count() {
    local tool=$1 f=$2
    case $tool in
    envc) grep -oE '[0-9]+ ran' "$f" | tail -n 1 | grep -oE '[0-9]+' || echo "?" ;;
    pyinfra)  # results table: "Grand total  Hosts Success Error NoChange" ("-" for 0)
        awk '/Grand total/ { v = ($4 == "-") ? 0 : $4 } END { print (v == "" ? "?" : v) }' "$f" ;;
    ansible) grep -oE 'changed=[0-9]+' "$f" | awk -F= '{ s += $2; n++ } END { print (n ? s : "?") }' ;;
    esac
}

# Compares every host with the workload's expectation; prints "yes" or "no" (details to stderr).
verify() {
    local w=$1 bad=0
    mkdir -p "$w/actual"
    for i in $(seq 0 $((HOSTS - 1))); do
        "$HOSTCTL" ssh "$H" "$i" sh -s <"$w/expected/verify.sh" >"$w/actual/h$i.txt" 2>&1 &
    done
    wait
    for i in $(seq 0 $((HOSTS - 1))); do
        if ! diff -q "$w/expected/h$i.txt" "$w/actual/h$i.txt" >/dev/null; then
            bad=$((bad + 1))
            [ $bad -gt 2 ] || diff "$w/expected/h$i.txt" "$w/actual/h$i.txt" | head -n 8 | sed "s/^/bench:   h$i: /" >&2
        fi
    done
    if [ $bad = 0 ]; then echo yes; else log "verification: $bad of $HOSTS hosts differ from the expectation"; echo no; fi
}

phase() {  # TOOL REP PHASE WORK
    local tool=$1 rep=$2 ph=$3 w=$4 logf=$OUT/logs/$1-$2-$3.log rc=0 t0 t1
    t0=$(now)
    run_tool "$tool" "$w" >"$logf" 2>&1 || rc=$?
    t1=$(now)
    local secs; secs=$(echo "$t1 - $t0" | bc)
    local ok; ok=$(verify "$w")
    local ch; ch=$(changed_count "$tool" "$logf")
    printf '%s\t%s\t%s\t%.2f\t%s\t%s\t%s\n' "$tool" "$rep" "$ph" "$secs" "$rc" "$ok" "$ch" >>"$RAW"
    log "$(printf '%-8s rep %s %-7s %7.2f s  rc=%s verified=%s changed=%s' "$tool" "$rep" "$ph" "$secs" "$rc" "$ok" "$ch")"
    [ "$rc" = 0 ] || { log "  $tool $ph failed (rc=$rc); last lines of $logf:"; tail -n 15 "$logf" | sed 's/^/bench:   /' >&2; }
}

for rep in $(seq 1 "$REPEAT"); do
    for tool in "${TOOLS[@]}"; do
        if [ "$tool" = envc ] && [ -z "$ENVC_OK" ]; then continue; fi
        w=$OUT/work/$tool-$rep
        log "$tool rep $rep: starting $HOSTS fresh hosts"
        "$HOSTCTL" up "$HOSTS" "$H"
        "$ROOT/scripts/bench/workload" "$w" --hosts-dir "$H" "${wl_flags[@]}"
        [ "$tool" != envc ] || [ "$PACKAGES" != yes ] || lock_envc "$w"
        phase "$tool" "$rep" cold "$w"
        phase "$tool" "$rep" noop "$w"
        "$ROOT/scripts/bench/workload" "$w" --hosts-dir "$H" "${wl_flags[@]}" --change
        phase "$tool" "$rep" change "$w"
        stop_archive
        "$HOSTCTL" down "$H" "$OUT/old-hosts.$tool-$rep.$$"
    done
done
# The last repetition's inputs stay, as work/TOOL; the rest goes now that nothing is timed.
for tool in "${TOOLS[@]}"; do
    [ ! -d "$OUT/work/$tool-$REPEAT" ] || mv "$OUT/work/$tool-$REPEAT" "$OUT/work/$tool"
done
find "$OUT/work" -mindepth 1 -maxdepth 1 -name '*-[0-9]*' -exec rm -rf {} +
rm -rf "$OUT"/old-work.* "$OUT"/old-hosts.*

# --- report ---------------------------------------------------------------------------
ver() { local v; v=$("$@" 2>/dev/null) || true; printf '%s' "$v" | head -n 1; }
machine=$(
    echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
    echo "- memory: $(free -g | awk '/Mem:/ {print $2}') GiB; kernel $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "- load average (1/5/15 min) before the runs: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the numbers)"
    echo "- envc: $(if [ -n "$ENVC_OK" ]; then ver "$ENVC" --version; else echo "skipped ($skip_envc)"; fi) (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    if [ -n "$VENV_BIN" ]; then
        echo "- $(ver "$VENV_BIN/pyinfra" --version | tr -d :), $(ver "$VENV_BIN/ansible" --version | tr -d "[]") (Python $(ver "$VENV_BIN/python" -c 'import platform; print(platform.python_version())'))"
    fi
    echo "- workload: $HOSTS hosts x ($FILES files$([ "$PACKAGES" = yes ] && echo " + 3 packages" || echo ", packages NOT included")); $REPEAT repetition(s), median shown; $(date -u +%Y-%m-%d)"
    kex=$ENVC_KEX
    [ -n "$kex" ] || kex="the OpenSSH default, $(ssh -Q kex 2>/dev/null | grep -m1 -E 'mlkem|sntrup' || echo '?') first"
    echo "- key exchange: envc $kex; pyinfra paramiko's curve25519-sha256"
)
python3 - "$RAW" "$HOSTS" "$OUT/results.md" "$machine" "${skip_envc:+envc skipped: $skip_envc}" <<'PY'
import csv, statistics, sys
raw, hosts, out, machine, note = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = list(csv.DictReader(open(raw), delimiter="\t"))
tools = list(dict.fromkeys(r["tool"] for r in rows))
def cell(tool, phase):
    rs = [r for r in rows if r["tool"] == tool and r["phase"] == phase]
    if not rs: return None, "–"
    med = statistics.median(float(r["seconds"]) for r in rs)
    flags = ""
    if any(r["rc"] != "0" for r in rs): flags += " (failed)"
    if any(r["verified"] != "yes" for r in rs): flags += " (not verified)"
    return med, f"{med:.2f}{flags}"
lines = ["| tool | cold (s) | no-op (s) | one change (s) | changed on the change run |",
         "|---|---:|---:|---:|---:|"]
med = {}
for t in tools:
    cs = []
    for ph in ("cold", "noop", "change"):
        m, c = cell(t, ph); med[t, ph] = m; cs.append(c)
    ch = [r["changed"] for r in rows if r["tool"] == t and r["phase"] == "change"]
    unit = {"envc": "nodes ran", "pyinfra": "operations changed", "ansible": "tasks changed"}[t]
    lines.append(f"| {t} | {' | '.join(cs)} | {'/'.join(dict.fromkeys(ch))} {unit} (target {hosts}) |")
text = "\n".join(lines) + "\n"
if note: text += f"\n{note}\n"
def clean(tool):
    rs = [r for r in rows if r["tool"] == tool]
    return rs and all(r["rc"] == "0" and r["verified"] == "yes" for r in rs)
if clean("envc") and clean("pyinfra") and med["envc", "noop"] and med["envc", "cold"]:
    n = med["pyinfra", "noop"] / med["envc", "noop"]; c = med["pyinfra", "cold"] / med["envc", "cold"]
    ch = med["pyinfra", "change"] / med["envc", "change"]
    verdict = lambda x, t: f"target >= {t}x: {'met' if x >= t else 'NOT met'}"
    text += (f"\nenvc vs pyinfra: no-op {n:.1f}x faster ({verdict(n, 50)}), "
             f"cold {c:.1f}x faster ({verdict(c, 3)}), "
             f"one change {ch:.1f}x faster ({verdict(ch, 10)}).\n")
    def secs(tool, rep, phase):
        return next(float(r["seconds"]) for r in rows
                    if (r["tool"], r["rep"], r["phase"]) == (tool, rep, phase))
    reps = list(dict.fromkeys(r["rep"] for r in rows))
    if len(reps) > 1:
        per = {ph: [secs("pyinfra", k, ph) / secs("envc", k, ph) for k in reps]
               for ph in ("noop", "cold", "change")}
        fmt = lambda xs: " / ".join(f"{x:.1f}x" for x in xs)
        text += (f"Round by round (each tool once per round): no-op {fmt(per['noop'])}, "
                 f"cold {fmt(per['cold'])}, one change {fmt(per['change'])}; medians: "
                 f"no-op {statistics.median(per['noop']):.1f}x, "
                 f"cold {statistics.median(per['cold']):.1f}x, "
                 f"one change {statistics.median(per['change']):.1f}x.\n")
text += "\n" + machine + "\n"
open(out, "w").write(text)
print(text, end="")
PY
log "results: $OUT/results.md (raw: $RAW, logs: $OUT/logs/)"
