# envc install_packages. Arguments: NAME or NAME=VERSION, one per package. One apt transaction.
# Prints   B INDEX STATUS VERSION   per package before,   A INDEX STATUS VERSION   after, and on
# failure   F EXIT_CODE apt-get   followed by   L LINE   for the last lines of apt's output.
need apt-get
query "$@"
report B "$@"
log=$(mktemp) || exit 90
trap 'rm -f "$log" "$log.try"' EXIT
trap 'exit 1' HUP INT TERM
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
    failed "$?" apt-get
fi
query "$@"
report A "$@"
