# envc apply_files. Arguments: TOKEN, then per file: PATH OWNER GROUP MODE WRITTEN (PATH
# absolute and normalized, MODE octal, WRITTEN the sha256 of what envc last wrote there, or
# empty). stdin: a tar archive whose member for PATH = DIR/NAME is DIR/.envc-new.TOKEN/NAME
# (relative to /), holding the file's content, mode, owner and group.
# One tar puts every file beside its destination, with its owner, group and mode; each is
# checked there and renamed over PATH (atomic: readers see the old file or the new one), one
# mv per directory. A batch costs a handful of processes, however many files it has.
# Prints per file:  R INDEX ok CREATED SHA256 MODE OWNER GROUP CHANGED   or   R INDEX err MESSAGE
# where CHANGED is `changed` when PATH held something other than WRITTEN before (`same` else).
set -u
umask 022
export LC_ALL=C
token=$1
shift
nl='
'

# $dir, $stage and $staged of PATH $1.
place() {
    dir=${1%/*}
    stage=$dir/.envc-new.$token
    staged=$stage/${1##*/}
    [ -n "$dir" ] || dir=/
}

# Whatever is left staged (a failure, a killed run) goes.
cleanup() {
    while [ $# -ge 5 ]; do
        place "$1"
        [ ! -d "$stage" ] || rm -rf -- "$stage"
        shift 5
    done
}
trap 'cleanup "$@"' EXIT
trap 'exit 1' HUP INT TERM

err() {
    printf 'R\t%s\terr\t%s\n' "$i" "$(printf '%s' "$1" | tr '\n\t' '  ')"
    eval "bad_$i=1"
}
bad() { eval "[ -n \"\${bad_$i:-}\" ]"; }

# The first line of $lines, taken off it.
next_line() {
    line=${lines%%"$nl"*}
    case $lines in *"$nl"*) lines=${lines#*"$nl"} ;; *) lines= ;; esac
}

# sha256sum of the files named, one line each in order, in $sums (empty, and status 1, when
# one cannot be read: the caller then goes file by file).
sums_of() {
    sums=
    [ $# -gt 0 ] || return 0
    sums=$(sha256sum -- "$@" 2>/dev/null) || { sums=; return 1; }
}
# The hash of a sha256sum line (which starts with `\` when the name had to be escaped).
hash_of() {
    h=${1#\\}
    h=${h%% *}
}

# Calls $1 once per file, with $path $owner $group $mode $written, its index $i, and its
# $dir, $stage and $staged set; a call that sets $keep adds that word to a list, with which
# $2 is called once all files are done (one process for all of them, not one per file).
each_file() {
    each=$1 then=$2
    shift 2
    n=$(($# / 5))
    i=0
    while [ "$i" -lt "$n" ]; do
        path=$1 owner=$2 group=$3 mode=$4 written=$5
        shift 5
        place "$path"
        keep=
        "$each"
        [ -z "$keep" ] || set -- "$@" "$keep"
        i=$((i + 1))
    done
    "$then" "$@"
}

# 1. Checks, and what each path holds now: `created`, and `changed` from WRITTEN (the
# hashes of the regular files among them taken by one sha256sum, into $lines).
look() {
    if [ -d "$path" ] && [ ! -L "$path" ]; then
        err "it is a directory"
    elif [ -e "$dir" ] && [ ! -d "$dir" ]; then
        err "cannot create its directory: \`$dir\` is not a directory"
    elif [ "$owner" != "$known_owner" ] && ! id -u -- "$owner" >/dev/null 2>&1; then
        err "the owner \`$owner\` does not exist on the host"
    elif [ "$group" != "$known_group" ] && ! getent group -- "$group" >/dev/null 2>&1; then
        err "the group \`$group\` does not exist on the host"
    else
        known_owner=$owner known_group=$group
        created=false
        [ -e "$path" ] || [ -L "$path" ] || created=true
        changed=same
        if [ -n "$written" ] && [ "$created" = false ]; then
            if [ -L "$path" ] || [ ! -f "$path" ]; then
                changed=changed
            else
                changed=hash
                keep=$path
            fi
        fi
        eval "created_$i=\$created changed_$i=\$changed"
    fi
}
hashes_before() { sums_of "$@" && lines=$sums || lines=; }

# 2. What the hashes say of the files whose content envc wrote before (file by file when
# one of them could not be read in the batch).
compare() {
    if ! bad && eval "[ \"\$changed_$i\" = hash ]"; then
        if [ -n "$lines" ]; then
            next_line
            hash_of "$line"
        elif ! h=$(sha256sum <"$path" 2>/dev/null); then
            h=
        fi
        [ "${h%% *}" = "$written" ] && c=same || c=changed
        eval "changed_$i=\$c"
    fi
}

# 3. Each staged file is checked where it lies: it arrived, with the owner, group and mode
# asked for (tar sets owners only as root). What fails is taken out before anything moves.
arrived() {
    if bad; then
        # Refused before it arrived: it must not move with the others.
        if [ -e "$staged" ] || [ -L "$staged" ]; then rm -f -- "$staged"; fi
    elif [ -f "$staged" ] && [ ! -L "$staged" ]; then
        keep=$staged
    else
        err "it could not be written: ${tar_out:-tar did not unpack it}"
    fi
}
read_staged() {
    stats=
    sums=
    if [ $# -gt 0 ]; then
        stats=$(stat -c '%a	%u	%g	%U	%G' -- "$@" 2>/dev/null) || stats=
        sums_of "$@" || sums=
    fi
}

# The facts of the staged file of $path, from the batch or (when the batch failed) alone.
facts() {
    if [ -n "$stats" ] && [ -n "$sums" ]; then
        lines=$stats; next_line; st=$line; stats=$lines
        lines=$sums; next_line; hash_of "$line"; sums=$lines
    else
        st=$(stat -c '%a	%u	%g	%U	%G' -- "$staged" 2>/dev/null) || st=
        h=$(sha256sum <"$staged" 2>/dev/null) || h=
        h=${h%% *}
    fi
}

inspect() {
    bad && return
    facts
    IFS='	' read -r a uid gid uname gname <<EOF
$st
EOF
    case $owner in *[!0-9]*) o=$uname ;; *) o=$uid ;; esac
    case $group in *[!0-9]*) g=$gname ;; *) g=$gid ;; esac
    if [ -z "$st" ] || [ -z "$h" ]; then
        err "written, but it cannot be read back"
    elif [ "$o" != "$owner" ] || [ "$g" != "$group" ] || [ $((0$a)) -ne $((0$mode)) ]; then
        err "it could not be given owner $owner, group $group and mode $mode (it has $uname, $gname and $a: setting owners needs root)"
    else
        eval "fact_$i=\"\$h	\$a	\$uname	\$gname\""
    fi
    bad && rm -f -- "$staged"
}

# 4. Into place: every file staged in a directory, in one mv; then the results.
place_staged() {
    bad && return
    if [ -d "$stage" ]; then
        mv_out=$(move_stage "$dir" "$stage" 2>&1) || true
        rmdir -- "$stage" 2>/dev/null || true
    fi
    if [ -e "$staged" ]; then
        err "it could not be renamed into place: $mv_out"
    else
        eval "printf 'R\t%s\tok\t%s\t%s\t%s\n' \"\$i\" \"\$created_$i\" \"\$fact_$i\" \"\$changed_$i\""
    fi
}

move_stage() {
    target=$1
    set -- "$2"/* "$2"/.[!.]* "$2"/..?*
    for f; do
        shift
        if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi
    done
    [ $# -eq 0 ] || mv -f -t "$target" -- "$@"
}

known_owner= known_group= mv_out=
each_file look hashes_before "$@"
each_file compare : "$@"
# --touch: a file's time is when it was placed, as with any other copy.
tar_out=$(tar -x -f - -C / --same-owner --same-permissions --touch 2>&1 | tail -n 3 | tr '\n' ' ')
each_file arrived read_staged "$@"
each_file inspect : "$@"
each_file place_staged : "$@"
