#!/bin/sh
# The weekly security update of an environment's lockfile, as the scheduled workflows
# (github-security-updates.yml, gitlab-security-updates.yml) run it: when a security update
# is pending, move the lockfile to it, commit it on a branch of its own, and write the pull
# request's body (what moved, and the CVEs and bugs each moved package's changelog names).
# Opening the pull request is the workflow's: this script needs only envc, git and sh.
#
#   ENV_FILE  the environment file (required)
#   BRANCH    the branch the update is committed on (envc/security-updates)
#   BODY      where the pull request's body is written (envc-security-updates.md)
#
# Exit 0 with `changed=true` or `changed=false` appended to $GITHUB_OUTPUT (when set) and
# to the file `envc-security-updates.env` (for GitLab's dotenv reports); any other exit is
# a failure worth a look (a lockfile that does not read, an archive that does not verify).
set -eu

: "${ENV_FILE:?set ENV_FILE to the environment file}"
BRANCH="${BRANCH:-envc/security-updates}"
BODY="${BODY:-envc-security-updates.md}"
LOCK="${ENV_FILE%.env}.lock"

result() {
    echo "changed=$1" > envc-security-updates.env
    if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "changed=$1" >> "$GITHUB_OUTPUT"; fi
}

# Exit 3: a security update is pending; 0: none; anything else is an error.
status=0
envc lock --outdated --refresh "$ENV_FILE" || status=$?
case "$status" in
    0) echo "no security update pending for $LOCK"; result false; exit 0 ;;
    3) ;;
    *) exit "$status" ;;
esac

envc lock "$ENV_FILE" --update=security
if git diff --quiet -- "$LOCK"; then
    echo "$LOCK is unchanged"
    result false
    exit 0
fi
# The change against the committed lockfile, read from the store's .debs: no network.
envc lock diff "HEAD:$LOCK" "$LOCK" --format markdown > "$BODY"

git checkout -B "$BRANCH"
git add -- "$LOCK"
git -c user.name="${GIT_AUTHOR_NAME:-envc}" -c user.email="${GIT_AUTHOR_EMAIL:-envc@localhost}" \
    commit --quiet --message "envc: security updates of $LOCK" --message "$(cat "$BODY")"
echo "committed the security updates of $LOCK on $BRANCH"
result true
