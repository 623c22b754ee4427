# envc list_packages. No arguments. Prints, for every package dpkg knows,
#   P NAME ARCHITECTURE STATUS VERSION PROVIDES PRE-DEPENDS DEPENDS CONFLICTS BREAKS
# (dpkg keeps each relation field on one line). One dpkg-query: it reads dpkg's whole
# database whatever it is asked.
need dpkg-query
dpkg-query -W -f 'P\t${Package}\t${Architecture}\t${db:Status-Status}\t${Version}\t${Provides}\t${Pre-Depends}\t${Depends}\t${Conflicts}\t${Breaks}\n'
