# envc probe_services. Arguments: NAME… Prints  N  when the host does not run systemd, else per
# unit  R INDEX absent  or  R INDEX present IS_ENABLED IS_ACTIVE
set -u
export LC_ALL=C SYSTEMD_PAGER= SYSTEMD_COLORS=0
if [ ! -d /run/systemd/system ]; then
    echo 'N'
    exit 0
fi
i=0
for name; do
    load=$(systemctl show --property=LoadState --value -- "$name" 2>/dev/null)
    if [ "$load" = not-found ] || [ -z "$load" ]; then
        printf 'R\t%s\tabsent\n' "$i"
    else
        printf 'R\t%s\tpresent\t%s\t%s\n' "$i" "$(systemctl is-enabled -- "$name" 2>/dev/null)" \
            "$(systemctl is-active -- "$name" 2>/dev/null)"
    fi
    i=$((i + 1))
done
