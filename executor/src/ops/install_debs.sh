# envc install_debs. Arguments: NAME… of the packages the nodes name, then `--`, then the NAME…
# of the packages of their closures. Standard input: a tar of the .deb files to install and
# SHA256SUMS listing each one's pinned sha256 (the controller checked them; this checks that
# they arrived whole). One apt transaction over exactly those files, with no package index
# and no source: nothing is downloaded, and a dependency the files and the installed system
# do not satisfy stops apt before anything is unpacked.
# Prints   B INDEX STATUS VERSION   per named package before,   A INDEX STATUS VERSION   after;
# H FILE   for a file whose hash does not match (then nothing is installed); and on failure
# F EXIT_CODE   followed by   L LINE   for the last lines of apt's output.
# Package names are checked by envc (no spaces, no globs): kept as word lists.
named=""
closure=""
list=named
for arg; do
    case $list:$arg in
    *:--) list=closure ;;
    named:*) named="$named $arg" ;;
    *) closure="$closure $arg" ;;
    esac
done
need_apt
# shellcheck disable=SC2086
query $named $closure
# shellcheck disable=SC2086
report B $named
# Closure packages that are not installed yet: installed as dependencies (apt-mark auto), so
# that `apt-get autoremove` removes them once nothing needs them, as apt's own would be.
fresh=""
for name in $closure; do
    st=$(state "$name")
    [ "${st%%"$tab"*}" = installed ] || fresh="$fresh $name"
done
dir=$(mktemp -d /tmp/envc-debs.XXXXXX) || exit 90
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM
log=$dir/log
mkdir -p "$dir/debs" "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts"
# No Pre-Install-Pkgs hooks: debconf's (dpkg-preconfigure, a Perl run over every package,
# about a third of apt's time here) only asks questions early, and envc asks none: the
# packages' own scripts still configure them, non-interactively, with debconf's defaults.
printf '#clear DPkg::Pre-Install-Pkgs;\n' >"$dir/apt.conf"
# apt reads local files as its sandbox user.
chmod 755 "$dir" "$dir/debs"
if ! tar -x -C "$dir/debs" -f - >"$log" 2>&1; then
    tail -n 3 "$log" | sed 's/^/H\ttar: /'
    report A $named
    exit 0
fi
cd "$dir/debs" || exit 90
if [ -s SHA256SUMS ] && ! sha256sum -c SHA256SUMS >"$log" 2>&1; then
    grep ': FAILED' "$log" | sed 's/^/H\t/'
    report A $named
    exit 0
fi
set --
for f in *.deb; do
    [ -e "$f" ] && set -- "$@" "$dir/debs/$f"
done
if [ $# -gt 0 ]; then
    if configure &&
        apt-get -c "$dir/apt.conf" -q -y -o DPkg::Lock::Timeout=600 \
            -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/parts" \
            -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" \
            -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            --no-install-recommends --no-remove --allow-downgrades \
            install "$@" >>"$log" 2>&1; then
        [ -z "$fresh" ] || apt-mark auto $fresh >>"$log" 2>&1 || true
    else
        printf 'F\t%s\n' "$?"
        tail -n 20 "$log" | sed 's/^/L\t/'
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
[ -z "$auto" ] || apt-mark manual $auto >/dev/null 2>&1 || true
# shellcheck disable=SC2086
query $named
# shellcheck disable=SC2086
report A $named
