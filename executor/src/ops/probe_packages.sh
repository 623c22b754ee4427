# envc probe_packages. Arguments: NAME… Prints per package:  R INDEX STATUS VERSION
set -u
export LC_ALL=C
i=0
for name; do
    st=$(dpkg-query -W -f '${db:Status-Status}\t${Version}' "$name" 2>/dev/null) ||
        st=$(printf 'not-installed\t')
    printf 'R\t%s\t%s\n' "$i" "$st"
    i=$((i + 1))
done
