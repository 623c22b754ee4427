# envc remove_files. Arguments, per file: PATH WRITTEN_SHA256 (empty: remove whatever is there).
# Removes each file (or symlink) that still holds what envc wrote; an absent one is fine, a
# directory is refused, and a file whose content changed since (another environment or a person
# wrote it) is left in place. Prints per file:
#   R INDEX ok  |  R INDEX absent  |  R INDEX changed  |  R INDEX err MESSAGE
set -u
export LC_ALL=C
i=0
while [ $# -ge 2 ]; do
    path=$1 written=$2
    shift 2
    if [ -d "$path" ] && [ ! -L "$path" ]; then
        printf 'R\t%s\terr\t%s\n' "$i" "it is a directory; envc removes only files it placed"
    elif [ ! -e "$path" ] && [ ! -L "$path" ]; then
        printf 'R\t%s\tabsent\n' "$i"
    elif [ -n "$written" ] && { [ -L "$path" ] || [ ! -f "$path" ] ||
        ! sha=$(sha256sum <"$path" 2>/dev/null) || [ "${sha%% *}" != "$written" ]; }; then
        printf 'R\t%s\tchanged\n' "$i"
    elif out=$(rm -f -- "$path" 2>&1); then
        printf 'R\t%s\tok\n' "$i"
    else
        printf 'R\t%s\terr\t%s\n' "$i" "$(printf '%s' "$out" | tr '\n\t' '  ')"
    fi
    i=$((i + 1))
done
