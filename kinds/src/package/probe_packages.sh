# envc probe_packages. Arguments: NAME… Prints per package:  R INDEX STATUS VERSION
query "$@"
report R "$@"
