# envc run_exec: one command of an `exec` node (or its undo), run on the target as
#   sh -c SCRIPT envc USER CWD LIMIT CREATES
# USER and CREATES are empty when not given. Standard input starts with the environment,
# one `NAME BASE64-VALUE` line per variable and a line `.`, then the arguments
#   NUNLESS UNLESS... NONLY ONLY_IF... ARGV...
# one `BASE64-VALUE` line each and a line `.`, read here with the shell's own `read` (byte
# by byte: nothing after the `.` line is consumed); variables are exported with the
# `export` builtin. So no value is ever on a command line (where `ps` would show it, and
# where ssh's connection sharing refuses a request of more than 256 KiB); the rest of
# standard input is the command's. Guards run first, with no input and their output
# discarded.
# Prints one line, then for X the command's output:
#   K<TAB>REASON      a guard found the command unnecessary: it did not run
#   E<TAB>MESSAGE     it could not be started
#   X<TAB>STATUS<TAB>TIMED_OUT<TAB>OUT_SIZE<TAB>OUT_SENT<TAB>ERR_SENT
#                     it ran: OUT_SENT bytes of its stdout (of OUT_SIZE) follow, then ERR_SENT
#                     bytes of the end of its stderr
set -u
export LC_ALL=C
user=$1 cwd=$2 limit=$3 creates=$4
shift 4
fail() {
    printf 'E\t%s\n' "$(printf '%s' "$1" | tr '\n\t' '\036 ')"
    exit 0
}
# `refs FIRST COUNT` prints ' "${FIRST}" ... ' for eval: positional parameters by number.
# Only numbers are written into the text that eval reads, never a value.
refs() {
    r= i=$1 end=$(($1 + $2))
    while [ "$i" -lt "$end" ]; do
        r="$r \"\${$i}\""
        i=$((i + 1))
    done
    printf '%s' "$r"
}
while IFS=' ' read -r name value; do
    [ "$name" = . ] && break
    # The x keeps trailing newlines that $(...) would strip.
    decoded=$(printf '%s' "$value" | base64 -d && echo x) || fail "cannot decode the environment variable $name"
    export "$name=${decoded%x}"
done
set --
while IFS= read -r value; do
    [ "$value" = . ] && break
    decoded=$(printf '%s' "$value" | base64 -d && echo x) || fail "cannot decode an argument"
    set -- "$@" "${decoded%x}"
done
pos=1
eval "n=\${$pos}"
unless_refs=$(refs $((pos + 1)) "$n")
pos=$((pos + 1 + n))
eval "n=\${$pos}"
only_refs=$(refs $((pos + 1)) "$n")
pos=$((pos + 1 + n))
argv_refs=$(refs "$pos" $(($# - pos + 1)))

cd -- "$cwd" 2>/dev/null || fail "cannot enter the directory $cwd (cwd): it does not exist or is not accessible"
as=
if [ -n "$user" ]; then
    id -u -- "$user" >/dev/null 2>&1 || fail "there is no user $user on this machine"
    as='runuser -u "$user" --'
fi
# The timeout is innermost: it signals the command's whole process group.
run='timeout -k 10 "$limit" env --'

if [ -n "$creates" ] && { [ -e "$creates" ] || [ -L "$creates" ]; }; then
    printf 'K\tcreates: %s exists\n' "$creates"
    exit 0
fi
# A guard answers with its exit status: 0 yes, 1 to 123 no. Any other status is no
# answer (timed out, could not run, killed by a signal), and the node fails, as it does
# for a missing guard: a guard that cannot answer must not decide.
unanswered() { # GUARD STATUS
    case $2 in
    124) fail "the $1 command did not finish within $limit s and was stopped (status 124): a guard that cannot answer decides nothing" ;;
    125|126|127) fail "the $1 command could not be run (status $2: not found or not executable)" ;;
    *) [ "$2" -gt 128 ] && fail "the $1 command was killed by signal $(($2 - 128)) (status $2): a guard that cannot answer decides nothing" ;;
    esac
    return 0
}
# Guards are evaluated here, not in a function: the refs name the script's own
# positional parameters.
if [ -n "$unless_refs" ]; then
    eval "$as $run $unless_refs" </dev/null >/dev/null 2>&1
    s=$?
    unanswered unless "$s"
    [ "$s" -eq 0 ] && { printf 'K\tunless: its command succeeded\n'; exit 0; }
fi
if [ -n "$only_refs" ]; then
    eval "$as $run $only_refs" </dev/null >/dev/null 2>&1
    s=$?
    unanswered only_if "$s"
    [ "$s" -ne 0 ] && { printf 'K\tonly_if: its command exited with status %s\n' "$s"; exit 0; }
fi

out=$(mktemp) && err=$(mktemp) || fail "cannot make temporary files (mktemp failed)"
trap 'rm -f "$out" "$err"' EXIT
start=$(date +%s)
eval "$as $run $argv_refs" >"$out" 2>"$err"
status=$?
timed_out=no
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    [ $(($(date +%s) - start)) -ge "$limit" ] && timed_out=yes
fi
out_size=$(wc -c <"$out")
out_sent=$((out_size < 1048576 ? out_size : 1048576))
err_size=$(wc -c <"$err")
err_sent=$((err_size < 65536 ? err_size : 65536))
printf 'X\t%s\t%s\t%s\t%s\t%s\n' "$status" "$timed_out" "$out_size" "$out_sent" "$err_sent"
head -c "$out_sent" "$out"
tail -c "$err_sent" "$err"
