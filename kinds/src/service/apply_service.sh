# envc apply_service. Arguments: NAME ENABLED RUNNING RESTART (each yes or no).
# Prints  N  when the host does not run systemd,  E MESSAGE  on failure, else
# S IS_ENABLED IS_ACTIVE  as observed afterwards.
set -u
export LC_ALL=C SYSTEMD_PAGER= SYSTEMD_COLORS=0
if [ ! -d /run/systemd/system ]; then
    echo 'N'
    exit 0
fi
name=$1 enabled=$2 running=$3 restart=$4
fail() {
    status=$(systemctl status --no-pager --lines=10 -- "$name" 2>&1 | tail -n 15)
    printf 'E\t%s\n' "$(printf '%s\n%s' "$1" "$status" | tr '\n\t' '\036 ')"
    exit 0
}
if [ "$enabled" = yes ]; then
    out=$(systemctl enable -- "$name" 2>&1) || fail "systemctl enable failed: $out"
else
    out=$(systemctl disable -- "$name" 2>&1) || fail "systemctl disable failed: $out"
fi
if [ "$running" = yes ]; then
    if [ "$restart" = yes ]; then
        out=$(systemctl restart -- "$name" 2>&1) || fail "systemctl restart failed: $out"
    else
        out=$(systemctl start -- "$name" 2>&1) || fail "systemctl start failed: $out"
    fi
else
    out=$(systemctl stop -- "$name" 2>&1) || fail "systemctl stop failed: $out"
fi
printf 'S\t%s\t%s\n' "$(systemctl is-enabled -- "$name" 2>/dev/null)" \
    "$(systemctl is-active -- "$name" 2>/dev/null)"
