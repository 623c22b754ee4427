#!/usr/bin/env bash
# examples/postgres for real: a PostgreSQL primary and two streaming replicas on three
# local QEMU VMs (TCG here: about 10 minutes on 2 cores, most of it installing PostgreSQL
# in three VMs at once), with the replication password as a secret. The build's last node
# holds the postcondition that the primary's pg_stat_replication shows both standbys
# streaming, so exit 0 means replication works. Then a no-op build (nothing runs), and
# the VMs are destroyed unless KEEP=1.
#
#   ./scripts/example-postgres.sh          # after ./scripts/setup; needs root
#
# Uses its own store (target/example-postgres; the image is built once and kept there)
# and a random password unless PG_REPLICATION_PASSWORD is set.
set -euo pipefail
cd "$(dirname "$0")/.."
envc=$PWD/target/release/envc
[ -x "$envc" ] || cargo build --release --locked --quiet
export ENVC_STORE=$PWD/target/example-postgres
mkdir -p "$ENVC_STORE"
export PG_REPLICATION_PASSWORD=${PG_REPLICATION_PASSWORD:-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')}
file=examples/postgres/prod.env
"$envc" destroy "$file" --yes >/dev/null
start=$(date +%s)
"$envc" build "$file"
echo "build: $(($(date +%s) - start)) s (replication streaming: the postcondition held)"
start=$(date +%s)
"$envc" build "$file" | tail -1
echo "no-op build: $(($(date +%s) - start)) s"
if [ "${KEEP:-0}" != 1 ]; then
    "$envc" destroy "$file" --yes | tail -1
fi
