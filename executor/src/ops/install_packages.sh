# envc install_packages. Arguments: NAME or NAME=VERSION, one per package. One apt transaction.
# Prints   B INDEX STATUS VERSION   per package before,   A INDEX STATUS VERSION   after, and on
# failure   F EXIT_CODE   followed by   L LINE   for the last lines of apt's output.
set -u
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
state() {
    dpkg-query -W -f '${db:Status-Status}\t${Version}' "$1" 2>/dev/null || printf 'not-installed\t'
}
report() {
    i=0
    for spec; do
        printf '%s\t%s\t%s\n' "$tag" "$i" "$(state "${spec%%=*}")"
        i=$((i + 1))
    done
}
if ! command -v apt-get >/dev/null 2>&1; then
    echo 'N'
    exit 0
fi
tag=B report "$@"
log=$(mktemp) || exit 90
trap 'rm -f "$log"' EXIT
trap 'exit 1' HUP INT TERM
# An interrupted dpkg run (a killed apply) is finished first. dpkg has no lock timeout: retry
# while another process holds its lock, as apt does with DPkg::Lock::Timeout below.
configure() {
    n=0
    until dpkg --force-confdef --force-confold --configure -a >>"$log" 2>&1; do
        n=$((n + 1))
        grep -q 'lock' "$log" && [ "$n" -lt 600 ] || return 1
        sleep 1
    done
}
# The package index is fetched when it is missing (a fresh image ships none) or does not
# offer a requested package or version; otherwise the machine's index is used as it is.
stale_index() {
    ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages' || return 0
    for spec; do
        apt-cache show "$spec" >/dev/null 2>&1 || return 0
    done
    return 1
}
if stale_index "$@"; then
    apt-get -q -o DPkg::Lock::Timeout=600 update >>"$log" 2>&1 || true
fi
if configure &&
    apt-get -q -y -o DPkg::Lock::Timeout=600 \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        --no-install-recommends --allow-downgrades install "$@" >>"$log" 2>&1; then
    :
else
    printf 'F\t%s\n' "$?"
    tail -n 20 "$log" | sed 's/^/L\t/'
fi
tag=A report "$@"
