# envc: what the package scripts share, prepended to them (ops/package.rs).
set -u
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
tab=$(printf '\t')
# What dpkg knows of the packages named (NAME or NAME=VERSION), in $known: one line
# `NAME<TAB>STATUS<TAB>VERSION` each. One dpkg-query for all of them: it reads dpkg's whole
# database each time it runs.
query() {
    names=""
    for spec; do names="$names ${spec%%=*}"; done
    # shellcheck disable=SC2086
    known=$(dpkg-query -W -f '${Package}\t${db:Status-Status}\t${Version}\n' $names 2>/dev/null)
}
# STATUS<TAB>VERSION of package $1 in $known (`not-installed<TAB>` when dpkg does not know it).
state() {
    found="not-installed$tab"
    while IFS=$tab read -r p st v; do
        if [ "$p" = "$1" ]; then
            found="$st$tab$v"
            break
        fi
    done <<EOF
$known
EOF
    printf '%s' "$found"
}
# TAG INDEX STATUS VERSION for each package named (NAME or NAME=VERSION), in order, as the
# last `query` found them.
report() {
    tag=$1
    shift
    i=0
    for spec; do
        printf '%s\t%s\t%s\n' "$tag" "$i" "$(state "${spec%%=*}")"
        i=$((i + 1))
    done
}
# Without the tool $1 (apt-get, dpkg) this script cannot work: `N TOOL`, and it stops.
need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    printf 'N\t%s\n' "$1"
    exit 0
}
# The failure of TOOL ($2) with exit code $1: `F CODE TOOL`, then the end of $log as `L LINE`.
failed() {
    printf 'F\t%s\t%s\n' "$1" "$2"
    tail -n 20 "$log" | sed 's/^/L\t/'
}
# dpkg with the arguments given, appending its output to $log. dpkg has no lock timeout of
# its own: while another process holds its lock (it says so before doing anything), it is
# asked again every second, for 10 minutes at most, as apt waits with DPkg::Lock::Timeout.
dpkg_waiting() {
    n=0
    while :; do
        dpkg --force-confdef --force-confold "$@" >"$log.try" 2>&1
        status=$?
        cat "$log.try" >>"$log"
        [ "$status" -ne 0 ] || return 0
        grep -q 'locked by another process' "$log.try" && [ "$n" -lt 600 ] || return "$status"
        n=$((n + 1))
        sleep 1
    done
}
# A fingerprint of dpkg's database: it changes whenever the database does (the status file,
# and the journal dpkg writes between rewrites of it).
dpkg_fingerprint() {
    cat /var/lib/dpkg/status /var/lib/dpkg/updates/* 2>/dev/null | cksum
}
# An interrupted dpkg run (a killed apply) is finished first.
configure() {
    dpkg_waiting --configure -a
}
