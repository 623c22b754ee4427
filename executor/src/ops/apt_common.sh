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
# No apt, no packages: `N`, and the script stops.
need_apt() {
    command -v apt-get >/dev/null 2>&1 && return 0
    echo 'N'
    exit 0
}
# An interrupted dpkg run (a killed apply) is finished first. dpkg has no lock timeout: retry
# while another process holds its lock, as apt does with DPkg::Lock::Timeout. Logs to $log.
configure() {
    n=0
    until dpkg --force-confdef --force-confold --configure -a >>"$log" 2>&1; do
        n=$((n + 1))
        grep -q 'lock' "$log" && [ "$n" -lt 600 ] || return 1
        sleep 1
    done
}
