# envc remove_files. Arguments: PATH… Removes each file (or symlink); an absent one is fine, a
# directory is refused. Prints per path:  R INDEX ok   or   R INDEX err MESSAGE
set -u
export LC_ALL=C
i=0
for path; do
    if [ -d "$path" ] && [ ! -L "$path" ]; then
        printf 'R\t%s\terr\t%s\n' "$i" "it is a directory; envc removes only files it placed"
    elif out=$(rm -f -- "$path" 2>&1); then
        printf 'R\t%s\tok\n' "$i"
    else
        printf 'R\t%s\terr\t%s\n' "$i" "$(printf '%s' "$out" | tr '\n\t' '  ')"
    fi
    i=$((i + 1))
done
