# envc: what the package scripts share, prepended to them (ops/package.rs).
set -u
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
# STATUS and VERSION of a package, as dpkg knows it.
state() {
    dpkg-query -W -f '${db:Status-Status}\t${Version}' "$1" 2>/dev/null || printf 'not-installed\t'
}
# TAG INDEX STATUS VERSION for each package named (NAME or NAME=VERSION), in order.
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
