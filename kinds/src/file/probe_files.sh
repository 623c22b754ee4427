# envc probe_files. Arguments: PATH… Prints per path:
#   R INDEX absent
#   R INDEX file SHA256 MODE OWNER GROUP       (a regular file, not a symlink)
#   R INDEX other KIND MODE OWNER GROUP        (directory, symbolic link, fifo, …)
#   R INDEX unreadable MESSAGE
set -u
export LC_ALL=C
i=0
for path; do
    if [ ! -e "$path" ] && [ ! -L "$path" ]; then
        printf 'R\t%s\tabsent\n' "$i"
    elif ! st=$(stat -c '%a	%U	%G' -- "$path" 2>&1); then
        printf 'R\t%s\tunreadable\t%s\n' "$i" "$(printf '%s' "$st" | tr '\n\t' '  ')"
    elif [ -f "$path" ] && [ ! -L "$path" ]; then
        if sha=$(sha256sum <"$path" 2>/dev/null); then
            printf 'R\t%s\tfile\t%s\t%s\n' "$i" "${sha%% *}" "$st"
        else
            printf 'R\t%s\tother\tunreadable file\t%s\n' "$i" "$st"
        fi
    else
        printf 'R\t%s\tother\t%s\t%s\n' "$i" "$(stat -c %F -- "$path")" "$st"
    fi
    i=$((i + 1))
done
