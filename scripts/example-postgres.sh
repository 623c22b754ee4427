#!/usr/bin/env bash
# examples/postgres for real: a PostgreSQL primary and two streaming replicas on three
# local QEMU VMs (TCG here: about 10 minutes on 2 cores, most of it installing PostgreSQL
# in three VMs at once), with the replication password as a secret. The build's last node
# holds the postcondition that the primary's pg_stat_replication shows both standbys
# streaming, so exit 0 means replication works. Then:
#   - a no-op build (nothing runs);
#   - the password rotated: exactly the nodes that use it run again (the role on the
#     primary, each standby's connection file and its restart; the clones are assessed
#     and skipped by their guard), and the postconditions, run again, still hold;
#   - neither password is anywhere in the store;
#   - the VMs are destroyed unless KEEP=1.
#
#   ./scripts/example-postgres.sh          # after ./scripts/setup; needs root
#
# Uses its own store (target/example-postgres; the image is built once and kept there).
set -euo pipefail
cd "$(dirname "$0")/.."
envc=$PWD/target/release/envc
[ -x "$envc" ] || cargo build --release --locked --quiet
export ENVC_STORE=$PWD/target/example-postgres
mkdir -p "$ENVC_STORE"
password() { head -c 18 /dev/urandom | base64 | tr -d '/+='; }
export PG_REPLICATION_PASSWORD=${PG_REPLICATION_PASSWORD:-$(password)}
first=$PG_REPLICATION_PASSWORD
file=examples/postgres/prod.env
"$envc" destroy "$file" --yes >/dev/null 2>&1
start=$(date +%s)
"$envc" build "$file"
echo "build: $(($(date +%s) - start)) s (replication streaming: the postcondition held)"
start=$(date +%s)
"$envc" build "$file" | tail -1
echo "no-op build: $(($(date +%s) - start)) s"

export PG_REPLICATION_PASSWORD=$(password)
start=$(date +%s)
ran=$("$envc" build "$file" --json | python3 -c 'import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e.get("event") == "node" and e["outcome"] != "cached":
        print(e["node"], "-", e["outcome"])')
echo "rotation: $(($(date +%s) - start)) s; ran:"
echo "$ran"
expected="db-0/exec:replicator-role
db-1/exec:basebackup
db-1/file:/etc/postgresql/15/main/conf.d/replication.conf
db-1/service:postgresql@15-main
db-2/exec:basebackup
db-2/file:/etc/postgresql/15/main/conf.d/replication.conf
db-2/service:postgresql@15-main"
if [ "$(echo "$ran" | cut -d' ' -f1 | sort)" != "$expected" ]; then
    echo "error: the rotation ran other nodes than those that use the password" >&2
    exit 1
fi
"$envc" drift "$file" --checks
echo "after the rotation: no drift, and the postconditions (both standbys streaming) hold"
# (machines/ holds the VMs' disks: the targets' own data, where the password belongs.)
if grep -rqF --exclude-dir=machines -e "$first" -e "$PG_REPLICATION_PASSWORD" "$ENVC_STORE"; then
    echo "error: a password is in the store" >&2
    exit 1
fi
echo "neither password is in the store ($(find "$ENVC_STORE" -type f | wc -l) files)"
if [ "${KEEP:-0}" != 1 ]; then
    "$envc" destroy "$file" --yes 2>&1 | tail -1
fi
