# envc install_debs. Arguments: the FINGERPRINT of dpkg's database the controller decided on
# (list_packages.sh), the NAME… of the packages the nodes name, then `--`, then the NAME… of
# the packages of their closures the host does not have (marked as dependencies).
# Standard input: a tar of the .deb files to install, in directories BATCH/ (00, 01, …: a
# package pre-depending on another comes in a later batch), and SHA256SUMS listing each
# one's pinned sha256 (the controller checked them, and checked that they install onto what
# this host has; this checks that they arrived whole). dpkg installs exactly those files,
# one `dpkg -i` per batch, with no apt, package index or source: nothing is downloaded.
# Prints   A INDEX STATUS VERSION   per named package after (the controller's listing says
# what was there before);   C   alone when dpkg's database is no longer the one listed (then
# nothing is installed: the controller lists it again);   H FILE   for a file whose hash
# does not match (then nothing is installed); and on failure   F EXIT_CODE dpkg   followed
# by   L LINE   for the last lines of dpkg's output.
# Package names are checked by envc (no spaces, no globs): kept as word lists.
listed=$1
shift
# apt-mark builds apt's cache to set a mark. dpkg's database has just changed, so the cache on
# disk is stale: it is built in memory only, not rebuilt and written out for nothing. And it
# is built from dpkg's database alone, with no sources: a mark is kept only for a package
# dpkg knows, so the archives' indexes change nothing but the time (1.4 s of CPU with
# bookworm's main index, against 0.04 s).
mark() {
    mkdir -p "$dir/no-sources"
    apt-mark -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
        -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/no-sources" "$@"
}
named=""
fresh=""
list=named
for arg; do
    case $list:$arg in
    *:--) list=fresh ;;
    named:*) named="$named $arg" ;;
    *) fresh="$fresh $arg" ;;
    esac
done
need dpkg
dir=$(mktemp -d /tmp/envc-debs.XXXXXX) || exit 90
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM
log=$dir/log
# Standard input is read to its end whatever happens, so that the controller's send ends.
# Once dpkg's lock is free (another apt or dpkg done) and an interrupted run is finished,
# the database must still be the one the controller decided on.
configure || {
    failed "$?" dpkg
    cat >/dev/null
    exit 0
}
if [ "$(dpkg_fingerprint)" != "$listed" ]; then
    echo C
    cat >/dev/null
    exit 0
fi
mkdir "$dir/debs"
if ! tar -x -C "$dir/debs" -f - >"$log" 2>&1; then
    tail -n 3 "$log" | sed 's/^/H\ttar: /'
    exit 0
fi
cd "$dir/debs" || exit 90
if [ -s SHA256SUMS ] && ! sha256sum --quiet -c SHA256SUMS >"$log" 2>&1; then
    grep ': FAILED' "$log" | sed 's/^/H\t/'
    exit 0
fi
set --
for batch in */; do
    [ -d "$batch" ] && set -- "$@" "$dir/debs/$batch"
done
if [ $# -gt 0 ]; then
    code=0
    for batch; do
        dpkg_waiting -i "$batch"*.deb || {
            code=$?
            break
        }
    done
    if [ "$code" -ne 0 ]; then
        failed "$code" dpkg
    elif [ -n "$fresh" ] && command -v apt-mark >/dev/null 2>&1; then
        # Marked as dependencies, so that `apt-get autoremove` removes them once nothing
        # needs them, as apt's own would be.
        # shellcheck disable=SC2086
        mark auto $fresh >>"$log" 2>&1 || true
    fi
fi
cd / || exit 90
# The packages the environment names are its own, never dependencies to autoremove: also
# when one was first installed as another's dependency, or when nothing had to be shipped.
# (apt-mark loads apt's whole cache: it runs only for a named package marked automatic.)
auto=""
for name in $named; do
    if awk -v p="$name" '$1 == "Package:" { cur = $2 } $1 == "Auto-Installed:" && $2 == 1 && cur == p { found = 1 } END { exit !found }' \
        /var/lib/apt/extended_states 2>/dev/null; then
        auto="$auto $name"
    fi
done
# shellcheck disable=SC2086
[ -z "$auto" ] || mark manual $auto >/dev/null 2>&1 || true
# shellcheck disable=SC2086
query $named
# shellcheck disable=SC2086
report A $named
