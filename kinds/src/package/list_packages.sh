# envc list_packages. No arguments. Prints   S FINGERPRINT   of dpkg's database (taken first:
# a change while it is listed shows as a change after), then for every package dpkg knows
#   P NAME ARCHITECTURE STATUS VERSION PROVIDES PRE-DEPENDS DEPENDS CONFLICTS BREAKS
# (dpkg keeps each relation field on one line). One dpkg-query: it reads dpkg's whole
# database whatever it is asked.
need dpkg-query
printf 'S\t%s\n' "$(dpkg_fingerprint)"
dpkg-query -W -f 'P\t${Package}\t${Architecture}\t${db:Status-Status}\t${Version}\t${Provides}\t${Pre-Depends}\t${Depends}\t${Conflicts}\t${Breaks}\n'
