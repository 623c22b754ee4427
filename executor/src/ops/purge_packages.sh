# envc purge_packages. Arguments: NAME… Purges those that are installed (or left configuration
# files behind), in one apt transaction. On failure prints  F EXIT_CODE  and  L LINE…
set -u
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
if ! command -v apt-get >/dev/null 2>&1; then
    echo 'N'
    exit 0
fi
# Keep, in "$@", only the packages dpkg knows as installed or half-removed.
for name; do
    shift
    st=$(dpkg-query -W -f '${db:Status-Status}' "$name" 2>/dev/null) || continue
    [ "$st" = not-installed ] || set -- "$@" "$name"
done
[ $# -gt 0 ] || exit 0
log=$(mktemp) || exit 90
trap 'rm -f "$log"' EXIT
trap 'exit 1' HUP INT TERM
if ! apt-get -q -y -o DPkg::Lock::Timeout=600 purge "$@" >"$log" 2>&1; then
    printf 'F\t%s\n' "$?"
    tail -n 20 "$log" | sed 's/^/L\t/'
fi
