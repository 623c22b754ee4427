# envc apply_files. stdin: a tar archive with one member per file, named 0, 1, … (its content).
# Arguments, per file: PATH OWNER GROUP MODE WRITTEN (PATH absolute and normalized, MODE octal,
# WRITTEN the sha256 of what envc last wrote there, or empty).
# Each file is written to a temporary name in its destination's directory, given its owner,
# group and mode, and renamed over PATH (atomic: readers see the old file or the new one).
# Prints per file:  R INDEX ok CREATED SHA256 MODE OWNER GROUP CHANGED   or   R INDEX err MESSAGE
# where CHANGED is `changed` when PATH held something other than WRITTEN before (`same` else).
set -u
umask 022
export LC_ALL=C
tmp=$(mktemp -d "${TMPDIR:-/tmp}/envc.XXXXXXXX") || exit 90
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
if ! out=$(tar -x -f - -C "$tmp" --no-same-owner --no-same-permissions 2>&1); then
    echo "tar could not unpack the files sent: $out" >&2
    exit 91
fi

err() {
    printf 'R\t%s\terr\t%s\n' "$i" "$(printf '%s' "$1" | tr '\n\t' '  ')"
}

apply_one() {
    if [ -d "$path" ] && [ ! -L "$path" ]; then
        err "it is a directory"
        return
    fi
    # Owners and groups are looked up once per batch (files mostly share them).
    if [ "$owner" != "$known_owner" ]; then
        if ! id -u -- "$owner" >/dev/null 2>&1; then
            err "the owner \`$owner\` does not exist on the host"
            return
        fi
        known_owner=$owner
    fi
    if [ "$group" != "$known_group" ]; then
        if ! getent group -- "$group" >/dev/null 2>&1; then
            err "the group \`$group\` does not exist on the host"
            return
        fi
        known_group=$group
    fi
    created=false
    [ -e "$path" ] || [ -L "$path" ] || created=true
    changed=same
    if [ -n "$written" ] && [ "$created" = false ]; then
        if [ -L "$path" ] || [ ! -f "$path" ] || ! old=$(sha256sum <"$path" 2>/dev/null) ||
            [ "${old%% *}" != "$written" ]; then
            changed=changed
        fi
    fi
    dir=${path%/*}
    [ -n "$dir" ] || dir=/
    if [ ! -d "$dir" ] && ! out=$(mkdir -p -- "$dir" 2>&1); then
        err "cannot create its directory: $out"
        return
    fi
    if ! new=$(mktemp "$dir/.envc-new.XXXXXXXX" 2>&1); then
        err "cannot create a temporary file beside it: $new"
        return
    fi
    # install copies the content and sets owner, group and mode in one process.
    if ! out=$(install -o "$owner" -g "$group" -m "$mode" -T -- "$tmp/$i" "$new" 2>&1) ||
        ! out=$(mv -f -T -- "$new" "$path" 2>&1); then
        rm -f -- "$new"
        err "$out"
        return
    fi
    if ! sha=$(sha256sum <"$path") || ! st=$(stat -c '%a	%U	%G' -- "$path"); then
        err "written, but it cannot be read back"
        return
    fi
    printf 'R\t%s\tok\t%s\t%s\t%s\t%s\n' "$i" "$created" "${sha%% *}" "$st" "$changed"
}

i=0
known_owner= known_group=
while [ $# -ge 5 ]; do
    path=$1 owner=$2 group=$3 mode=$4 written=$5
    shift 5
    apply_one
    i=$((i + 1))
done
