# envc remove_service. Arguments: NAME. Stops and disables the unit; an absent unit is fine.
# Prints  N  when the host does not run systemd,  E MESSAGE  on failure, else  S
set -u
export LC_ALL=C SYSTEMD_PAGER= SYSTEMD_COLORS=0
if [ ! -d /run/systemd/system ]; then
    echo 'N'
    exit 0
fi
name=$1
load=$(systemctl show --property=LoadState --value -- "$name" 2>/dev/null)
if [ "$load" != not-found ] && [ -n "$load" ]; then
    if ! out=$(systemctl disable --now -- "$name" 2>&1); then
        printf 'E\t%s\n' "$(printf 'systemctl disable --now failed: %s' "$out" | tr '\n\t' '\036 ')"
        exit 0
    fi
fi
echo 'S'
