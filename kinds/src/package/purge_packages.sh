# envc purge_packages. Arguments: NAME… Purges those that are installed (or left configuration
# files behind), in one apt transaction, and then the packages they brought in as
# dependencies that nothing needs any more: the packages of their dependency closure that
# apt marks automatically installed and would autoremove (never a package someone installed
# by hand, never one another installed package still needs). A host with dpkg and no apt (pinned
# packages need no more) has them purged by dpkg, and nothing else: without apt, nothing
# recorded what came as a dependency. On failure prints   F EXIT_CODE TOOL   and   L LINE…
need dpkg
# Keep, in "$@", only the packages dpkg knows as installed or half-removed.
query "$@"
for name; do
    shift
    st=$(state "$name")
    [ "${st%%"$tab"*}" = not-installed ] || set -- "$@" "$name"
done
[ $# -gt 0 ] || exit 0
log=$(mktemp) || exit 90
trap 'rm -f "$log" "$log.try" "$log.closure"' EXIT
trap 'exit 1' HUP INT TERM
if ! command -v apt-get >/dev/null 2>&1; then
    dpkg_waiting --purge "$@" || failed "$?" dpkg
    exit 0
fi
closure=$(apt-cache depends --recurse --installed --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null | grep -v '^ ' | sort -u)
apt() {
    apt-get -q -y -o DPkg::Lock::Timeout=600 "$@" >>"$log" 2>&1
}
apt purge "$@" || {
    failed "$?" apt-get
    exit 0
}
printf '%s\n' "$closure" >"$log.closure"
# shellcheck disable=SC2046
set -- $(apt-get -s autoremove 2>/dev/null | awk '$1 == "Remv" { print $2 }' |
    grep -Fx -f "$log.closure" || true)
# The named packages are gone, which is what was asked: what they leave behind is tidied
# where apt can, and never fails the step.
[ $# -eq 0 ] || apt purge "$@" || true
