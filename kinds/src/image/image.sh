#!/bin/bash
# envc-image: build a bit-reproducible, bootable Debian VM image.
#
# Usage: image.sh OUT_DIR SUITE MIRROR PACKAGES CACHE_DIR [FILES_DIR]
#
#   OUT_DIR    receives rootfs.tar, disk.raw, vmlinuz, kernel-version and
#              packages.txt (created if missing)
#   SUITE      Debian suite, e.g. bookworm
#   MIRROR     e.g. http://deb.debian.org/debian (the guest keeps
#              "deb MIRROR SUITE main" in /etc/apt/sources.list)
#   PACKAGES   comma-separated extra packages (may be empty)
#   CACHE_DIR  .deb cache reused across builds; never affects the output bits
#   FILES_DIR  optional tree copied into the rootfs root (owned root:root,
#              modes as in the tree, mtimes set to SOURCE_DATE_EPOCH)
#
# SOURCE_DATE_EPOCH must be set; it is the only clock the outputs see.
# ENVC_PINNED_DEBS, when set, is a directory of the lockfile's .debs for this
# image, each named SHA256.deb and already checked against its pin by envc:
# they become a local archive, the only one the build sees (MIRROR is then
# only what the guest's sources.list names), and CACHE_DIR is not used.
# Runs as root or as an ordinary user, on Debian 12 (mmdebstrap 1.3.5,
# e2fsprogs 1.47.0, util-linux 2.38), with the same outputs either way:
# mmdebstrap's unshare mode makes the rootfs (its tarball is bit for bit the
# root mode's), and the disk is laid out in a private mount namespace (as an
# ordinary user, a user namespace that maps the user's subordinate ids, from
# /etc/subuid and /etc/subgid, through newuidmap and newgidmap). Nothing is
# mounted on the machine itself, so a killed build leaves no mount behind.
# This script is embedded in envc and run as `bash -c "$SCRIPT" image.sh
# ARGS...`, so it must not depend on its own path: every guest file is
# written from a heredoc.
#
# The image boots directly with the Debian cloud kernel (no initramfs, no
# bootloader): the caller passes vmlinuz to QEMU with
# "root=/dev/nvme0n1 rw console=ttyS0 systemd.hostname=NAME". disk.raw is a
# whole-disk ext4 filesystem (no partition table) that grows to the size of
# the VM's disk on first boot (x-systemd.growfs).
#
# Same inputs (arguments, SOURCE_DATE_EPOCH and mirror content, or the pinned
# .debs) give the same rootfs.tar, disk.raw and vmlinuz, bit for bit.

set -euo pipefail
umask 022
export LC_ALL=C

log() { printf 'envc-image: %s\n' "$*" >&2; }
die() { printf 'envc-image: error: %s\n' "$*" >&2; exit 1; }

if [ $# -lt 5 ] || [ $# -gt 6 ]; then
    die "usage: image.sh OUT_DIR SUITE MIRROR PACKAGES CACHE_DIR [FILES_DIR]"
fi
OUT_DIR=$1 SUITE=$2 MIRROR=$3 PACKAGES=$4 CACHE_DIR=$5 FILES_DIR=${6:-}

# ---------------------------------------------------------------- checks ---

# As root, namespaces need nothing more. An ordinary user needs subordinate
# ids for the files of the guest's own users (mmdebstrap's unshare mode, and
# the namespace in which the disk is laid out).
if [ "$(id -u)" = 0 ]; then
    IN_NAMESPACE=(unshare --mount --propagation private)
else
    ME=$(id -un)
    for tool in newuidmap newgidmap; do
        command -v "$tool" >/dev/null ||
            die "$tool not found: an image built without root needs the uidmap package (\`apt-get install uidmap\`, which scripts/setup does)"
    done
    for f in /etc/subuid /etc/subgid; do
        awk -F: -v u="$ME" -v i="$(id -u)" '($1 == u || $1 == i) && $3 >= 65536 { ok = 1 } END { exit !ok }' "$f" 2>/dev/null ||
            die "$f gives $ME no range of 65536 subordinate ids, which an image built without root needs for the guest's users: as root, \`usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $ME\` (any free range)"
    done
    IN_NAMESPACE=(unshare --map-users=auto --map-groups=auto --map-root-user --mount --propagation private)
fi
[[ ${SOURCE_DATE_EPOCH:-} =~ ^[0-9]+$ ]] ||
    die "SOURCE_DATE_EPOCH must be set to a number of seconds"
SDE=$SOURCE_DATE_EPOCH
export SOURCE_DATE_EPOCH

for tool in mmdebstrap mke2fs debugfs e2fsck tar mount umount unshare \
    dpkg-query dpkg-deb sha256sum chroot; do
    command -v "$tool" >/dev/null || die "required tool not found: $tool"
done
MERGED_USR_HOOKS=/usr/share/mmdebstrap/hooks/merged-usr
[ -d "$MERGED_USR_HOOKS" ] || die "mmdebstrap's hooks not found: $MERGED_USR_HOOKS"

[[ $SUITE =~ ^[a-z0-9][a-z0-9.-]*$ ]] || die "bad SUITE: '$SUITE'"
[[ $MIRROR =~ ^(https?|file)://[^[:space:]]+$ ]] || die "bad MIRROR: '$MIRROR'"

# PACKAGES: names, optionally name=version or name/release; empty items
# (e.g. a trailing comma) are ignored.
EXTRA=()
IFS=, read -r -a items <<<"$PACKAGES"
for p in "${items[@]}"; do
    [ -n "$p" ] || continue
    [[ $p =~ ^[a-z0-9][a-z0-9+.-]*([=/][A-Za-z0-9.+:~_-]+)?$ ]] ||
        die "bad package name in PACKAGES: '$p'"
    EXTRA+=("$p")
done
# The caller passes the whole list, the base every image has included
# (image.rs, BASE_PACKAGES: the lockfile resolves the same list).
[ ${#EXTRA[@]} -gt 0 ] || die "PACKAGES is empty: give at least the base packages"
INCLUDE=$(IFS=,; echo "${EXTRA[*]}")

mkdir -p "$OUT_DIR" "$CACHE_DIR" || die "cannot create OUT_DIR or CACHE_DIR"
OUT_DIR=$(realpath "$OUT_DIR")
CACHE_DIR=$(realpath "$CACHE_DIR")
if [ -n "$FILES_DIR" ]; then
    [ -d "$FILES_DIR" ] || die "FILES_DIR is not a directory: $FILES_DIR"
    FILES_DIR=$(realpath "$FILES_DIR")
    # Fail early on names the debugfs step below cannot express.
    bad=$(find "$FILES_DIR" \( -name '*"*' -o -name $'*\n*' \) -print -quit)
    [ -z "$bad" ] || die "file name not supported (contains '\"' or newline): $bad"
fi

# Fixed filesystem UUID and directory hash seed, derived from
# SOURCE_DATE_EPOCH (mke2fs would otherwise pick random ones).
derive_uuid() {
    local h
    h=$(printf 'envc-image:%s:%s' "$1" "$SDE" | sha256sum)
    # RFC 4122 layout with version 4 / variant 1 bits, so tools accept it.
    printf '%s-%s-4%s-8%s-%s\n' "${h:0:8}" "${h:8:4}" "${h:13:3}" \
        "${h:17:3}" "${h:20:12}"
}
FS_UUID=$(derive_uuid fs-uuid)
HASH_SEED=$(derive_uuid hash-seed)

# --------------------------------------------------------- work dir/trap ---

# Everything is built in a temp dir under OUT_DIR and moved into place only
# at the very end, so a failed run never leaves outputs with final names.
WORK=$(mktemp -d "$OUT_DIR/.envc-image.XXXXXX")
# What mmdebstrap's unshared root reads (the hooks, the guest's files, the
# local archive) and its chroot: readable by anyone, since that root is one
# of the user's subordinate ids, which may not enter the store (under a home
# directory of mode 0700, say). In /tmp, a fixed place, because the
# archive's path goes into a sources.list line, which apt splits on spaces.
SCRATCH=$(mktemp -d /tmp/envc-image.XXXXXX)
chmod 0755 "$SCRATCH"

cleanup() {
    local rc=$?
    # mmdebstrap removes its chroot as it ends; one it left when killed hard
    # belongs to subordinate ids, which only a namespace that maps them can
    # remove. The disk was laid out in a namespace of its own: its mounts
    # went with it.
    "${IN_NAMESPACE[@]}" rm -rf --one-file-system "$SCRATCH" 2>/dev/null ||
        rm -rf --one-file-system "$SCRATCH" 2>/dev/null || true
    rm -rf --one-file-system "$WORK" 2>/dev/null || true
    if [ "$rc" -ne 0 ]; then
        log "failed (exit $rc); no outputs written"
    fi
}
# mmdebstrap runs in the background (see below) so that a signal is handled
# at once: it is passed on, and mmdebstrap removes its chroot before we
# clean up.
MM_PID=
on_signal() {
    if [ -n "$MM_PID" ]; then
        kill -TERM "$MM_PID" 2>/dev/null || true
        wait "$MM_PID" 2>/dev/null || true
    fi
    exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# --------------------------------------------------------- local archive ---

# Locked: an archive of exactly the pinned .debs (dists/SUITE/main with a
# Packages index made from their own control fields, and a Release that
# hashes it), given to mmdebstrap with copy:// so apt copies each .deb into
# the chroot and nothing of this path is left in the image. Trusted without
# a signature: envc checked every .deb against the lockfile's sha256.
PINNED=${ENVC_PINNED_DEBS:-}
SOURCE=$MIRROR
if [ -n "$PINNED" ]; then
    [ -d "$PINNED" ] || die "ENVC_PINNED_DEBS is not a directory: $PINNED"
    PINNED=$(realpath "$PINNED")
    ARCH=$(dpkg --print-architecture)
    # Copies, readable by mmdebstrap's unshared root, which may not enter the
    # store (a link would keep the store's modes).
    REPO=$SCRATCH/archive
    INDEX=$REPO/dists/$SUITE/main/binary-$ARCH
    mkdir -p "$INDEX" "$REPO/pool"
    cp --reflink=auto "$PINNED"/*.deb "$REPO/pool/" 2>/dev/null ||
        die "cannot copy the pinned .debs from $PINNED"
    n=0
    for deb in "$REPO"/pool/*.deb; do
        [ -f "$deb" ] || continue
        name=${deb##*/}
        [[ $name =~ ^[0-9a-f]{64}\.deb$ ]] || die "pinned .deb not named SHA256.deb: $name"
        dpkg-deb --field "$deb" || die "not a .deb: $name"
        printf 'Filename: pool/%s\nSize: %s\nSHA256: %s\n\n' \
            "$name" "$(stat -c %s "$deb")" "${name%.deb}"
        n=$((n + 1))
    done >"$INDEX/Packages"
    [ "$n" -gt 0 ] || die "ENVC_PINNED_DEBS has no .deb"
    {
        printf 'Suite: %s\nCodename: %s\nArchitectures: %s\nComponents: main\n' \
            "$SUITE" "$SUITE" "$ARCH"
        printf 'SHA256:\n %s %s main/binary-%s/Packages\n' \
            "$(sha256sum <"$INDEX/Packages" | cut -d' ' -f1)" \
            "$(stat -c %s "$INDEX/Packages")" "$ARCH"
    } >"$REPO/dists/$SUITE/Release"
    SOURCE="deb [trusted=yes] copy://$REPO $SUITE main"
    CACHE_DIR=
    log "local archive of $n pinned .debs"
fi

# ------------------------------------------------------------ guest files ---

# Files copied into the guest by the customize hook (owner root:root,
# mtime SOURCE_DATE_EPOCH).
OVL=$SCRATCH/overlay
mkdir -p "$OVL/etc/systemd/network" "$OVL/etc/ssh/sshd_config.d" \
    "$OVL/etc/systemd/system/ssh.service.d" "$OVL/usr/local/lib/envc" \
    "$OVL/etc/apt"

# The guest's archive is the mirror, whatever the build installed from (and
# without the signed-by option mmdebstrap adds or not by what the build
# machine's apt trusts).
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$OVL/etc/apt/sources.list"

# Whole-disk filesystem; x-systemd.growfs grows it to the (bigger) disk of
# each VM on boot. The kernel already mounted it rw (root=... rw).
cat >"$OVL/etc/fstab" <<'EOF'
/dev/nvme0n1 / ext4 rw,x-systemd.growfs 0 1
EOF

# systemd-resolved is not installed on bookworm; QEMU user-mode networking
# answers DNS on 10.0.2.3.
cat >"$OVL/etc/resolv.conf" <<'EOF'
nameserver 10.0.2.3
EOF

# No locales package; C.UTF-8 is built into libc (also silences pam_env's
# complaint about the missing file at every ssh login).
mkdir -p "$OVL/etc/default"
cat >"$OVL/etc/default/locale" <<'EOF'
LANG=C.UTF-8
EOF

# Nothing in the base system ships /etc/hosts. The VM's own name is not in
# it (it is only known at boot).
cat >"$OVL/etc/hosts" <<'EOF'
127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF

# Two network cards, named by their PCI slot (envc's qemu provider puts them
# there): nat0 is QEMU's user-mode NAT (DHCP; envc's ssh comes in through a
# port forward), lan0 the environment's private network, where the VM's
# address comes from the kernel command line (envc.lan=10.89.0.N/24).
cat >"$OVL/etc/systemd/network/10-envc-nat.link" <<'EOF'
[Match]
Path=pci-0000:00:04.0

[Link]
Name=nat0
EOF
cat >"$OVL/etc/systemd/network/10-envc-lan.link" <<'EOF'
[Match]
Path=pci-0000:00:05.0

[Link]
Name=lan0
EOF
cat >"$OVL/etc/systemd/network/20-envc-dhcp.network" <<'EOF'
[Match]
Name=nat0 en* eth*

[Network]
DHCP=yes
EOF
mkdir -p "$OVL/etc/systemd/system/systemd-networkd.service.wants"
cat >"$OVL/etc/systemd/system/envc-lan.service" <<'EOF'
[Unit]
Description=envc private network address from the kernel command line
DefaultDependencies=no
Before=systemd-networkd.service
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/local/lib/envc/lan
EOF
ln -s ../envc-lan.service \
    "$OVL/etc/systemd/system/systemd-networkd.service.wants/envc-lan.service"
cat >"$OVL/usr/local/lib/envc/lan" <<'EOF'
#!/bin/sh
# envc.lan=ADDRESS/PREFIX on the kernel command line -> a networkd config for
# lan0 (in /run: it belongs to this boot's command line, not to the disk).
set -eu
for arg in $(cat /proc/cmdline); do
    case $arg in
    envc.lan=*)
        mkdir -p /run/systemd/network
        printf '[Match]\nName=lan0\n\n[Network]\nAddress=%s\nLinkLocalAddressing=no\n' \
            "${arg#envc.lan=}" >/run/systemd/network/20-envc-lan.network
        ;;
    esac
done
EOF
chmod 0755 "$OVL/usr/local/lib/envc/lan"

# Only an ed25519 host key: RSA key generation takes ~8 s under TCG
# emulation, ed25519 is instant. Naming a HostKey disables the defaults.
cat >"$OVL/etc/ssh/sshd_config.d/50-envc.conf" <<'EOF'
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
EOF

# The image carries no host key (every VM must get its own). This runs
# before sshd's own config test, which fails without a host key, hence the
# reset of ExecStartPre.
cat >"$OVL/etc/systemd/system/ssh.service.d/50-envc-host-key.conf" <<'EOF'
[Service]
ExecStartPre=
ExecStartPre=/usr/local/lib/envc/ssh-host-key
ExecStartPre=/usr/sbin/sshd -t
EOF

# Generates the host key once (first boot; it persists on the VM's disk) and
# prints the public key on the serial console on every start, so the
# controller can pin it instead of trusting on first use.
cat >"$OVL/usr/local/lib/envc/ssh-host-key" <<'EOF'
#!/bin/sh
set -eu
key=/etc/ssh/ssh_host_ed25519_key
if [ ! -s "$key" ] || [ ! -s "$key.pub" ]; then
    rm -f "$key" "$key.pub" "$key.tmp" "$key.tmp.pub"
    ssh-keygen -q -t ed25519 -N '' -C '' -f "$key.tmp"
    sync "$key.tmp" "$key.tmp.pub"
    # private key first: the pair only counts once the .pub is there
    mv "$key.tmp" "$key"
    mv "$key.tmp.pub" "$key.pub"
    sync /etc/ssh
fi
line="envc-host-key: $(cut -d' ' -f1,2 "$key.pub")"
echo "$line"
if [ -c /dev/ttyS0 ]; then
    printf '%s\n' "$line" >/dev/ttyS0 || true
fi
EOF
chmod 0755 "$OVL/usr/local/lib/envc/ssh-host-key"

# The guest's own files from FILES_DIR, where the unshared root reads them.
FILES=
if [ -n "$FILES_DIR" ]; then
    FILES=$SCRATCH/files
    cp -a "$FILES_DIR" "$FILES" || die "cannot copy FILES_DIR"
fi

# The customize hook: runs in mmdebstrap's namespace as its root, after all
# packages are installed. Arguments: ROOTFS OVERLAY [FILES].
# Environment: SOURCE_DATE_EPOCH.
cat >"$SCRATCH/customize.sh" <<'EOF'
#!/bin/bash
set -euo pipefail
root=$1 overlay=$2 files=${3:-}
# The build's own directory may be closed to this root (find returns to it).
cd /

# A download touches archives/partial/, a fully cached build does not: pin
# the directories' mtimes so the cache state does not show in the output.
find "$root/var/cache/apt" -type d -exec touch -d "@$SOURCE_DATE_EPOCH" {} +

# Copy a tree into the rootfs: root:root, mtime SOURCE_DATE_EPOCH, existing
# directories (and symlinks to directories, e.g. /bin -> usr/bin) untouched.
copy_tree() {
    tar -C "$1" --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$SOURCE_DATE_EPOCH" -cf - . |
        tar -C "$root" -xpf - --numeric-owner --no-overwrite-dir \
            --keep-directory-symlink
}
copy_tree "$overlay"
if [ -n "$files" ]; then
    copy_tree "$files"
fi

chroot "$root" systemctl enable systemd-networkd.service
# The VM's packages are installed by envc over ssh: apt's timers would race
# it for the dpkg lock. e2scrub needs LVM snapshots (none here) and costs
# ~9 s of CPU at every boot under TCG.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    e2scrub_reap.service; do
    if [ -e "$root/usr/lib/systemd/system/$unit" ]; then
        chroot "$root" systemctl disable "$unit"
    fi
done

# No host keys in the image (openssh-server's postinst generated some).
rm -f "$root"/etc/ssh/ssh_host_*
# mmdebstrap copied the build host's /etc/hostname; the VM's name comes from
# the kernel command line (systemd.hostname=).
rm -f "$root/etc/hostname"
# INITRD=No should have prevented it; the cloud kernel needs no initramfs.
rm -f "$root"/boot/initrd.img-* "$root"/initrd.img "$root"/initrd.img.old
EOF
# Everything in it, the archive and the guest's files too, for the unshared root.
chmod -R a+rX "$SCRATCH"

# ---------------------------------------------------------------- rootfs ---

log "building rootfs ($SUITE from ${PINNED:+the pinned .debs, for }$MIRROR; packages: $INCLUDE)"
MMLOG=$WORK/mmdebstrap.log
# - --mode=unshare: as root and as an ordinary user alike, so that both
#   build one way (mmdebstrap's tarball is the same as root mode's).
# - INITRD=No: initramfs-tools' kernel hook skips building an initramfs
#   (the cloud kernel has NVMe and ext4 built in).
# - The package cache: the special hooks sync-in and copy-out move .debs
#   between CACHE_DIR and the chroot as this user, since the unshared root
#   may not write (or read) it. --skip=essential/unlink keeps the essential
#   .debs in the chroot until copy-out; mmdebstrap's cleanup (apt-get clean)
#   then removes them all from the rootfs.
# - the merged-usr hook sets up merged /usr the way debootstrap does, so
#   apt does not pull in usrmerge (and perl) to convert the tree.
# - docs, man pages and translations are left out (the dpkg path-excludes
#   stay in the guest, so later installs are lean too).
# - apt lists are removed by mmdebstrap's cleanup; run apt-get update in the
#   VM before installing.
CACHE_HOOKS=()
if [ -n "$CACHE_DIR" ]; then
    mkdir -p "$WORK/debs-out"
    CACHE_HOOKS=(
        --setup-hook='mkdir -p "$1/var/cache/apt/archives/"'
        --setup-hook="sync-in $CACHE_DIR /var/cache/apt/archives/"
        --customize-hook="copy-out /var/cache/apt/archives/ $WORK/debs-out"
    )
fi
# From a directory its unshared root may enter (every path above is absolute).
cd "$SCRATCH"
# shellcheck disable=SC2016 # the hooks are expanded by mmdebstrap's sh
INITRD=No TMPDIR=$SCRATCH \
    mmdebstrap --mode=unshare --variant=apt --format=tar \
        --include="$INCLUDE" \
        --skip=essential/unlink \
        --hook-dir="$MERGED_USR_HOOKS" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --customize-hook="bash $SCRATCH/customize.sh \"\$1\" $OVL $FILES" \
        "${CACHE_HOOKS[@]}" \
        "$SUITE" "$WORK/rootfs.tar" "$SOURCE" </dev/null >"$MMLOG" 2>&1 &
MM_PID=$!
mm_rc=0
wait "$MM_PID" || mm_rc=$?
MM_PID=
if [ "$mm_rc" -ne 0 ]; then
    tail -n 10 "$MMLOG" | sed 's/^/envc-image: mmdebstrap: /' >&2
    die "mmdebstrap failed (last lines of its log above)"
fi
log "rootfs.tar: $(du -h --apparent-size "$WORK/rootfs.tar" | cut -f1)"

# Newly downloaded .debs into the cache: to a temp name, then renamed, so a
# concurrent or interrupted build never sees a truncated .deb. A cache this
# user may not write is only slower, never wrong.
if [ -n "$CACHE_DIR" ]; then
    # copy-out copies the directory itself, as cp does: debs-out/archives/.
    for f in "$WORK"/debs-out/archives/*.deb; do
        [ -f "$f" ] || continue
        b=${f##*/}
        [ -e "$CACHE_DIR/$b" ] && continue
        { cp "$f" "$CACHE_DIR/.$b.tmp.$$" && mv -f "$CACHE_DIR/.$b.tmp.$$" "$CACHE_DIR/$b"; } 2>/dev/null || {
            rm -f "$CACHE_DIR/.$b.tmp.$$" 2>/dev/null
            log "cannot keep $b in the package cache $CACHE_DIR"
            break
        }
    done
    rm -rf "$WORK/debs-out"
fi

# -------------------------------------------------------------- staging ---

# Everything from the tarball to disk.raw runs as root of a private mount
# namespace (for an ordinary user, in a user namespace too, whose root is
# the user and whose other ids are the subordinate ones): the tmpfs and the
# guest's owners exist only there, and are gone with it, however this ends.
stage() {
    set -euo pipefail

    # mke2fs -d lays out inodes in the staging directory's readdir order, which
    # on disk filesystems (ext4 htree, ...) depends on hashes and history. A
    # fresh tmpfs filled from the name-sorted tar gives the same order every
    # time.
    log "extracting rootfs into tmpfs"
    STAGE=$WORK/stage
    tar_bytes=$(stat -c %s "$WORK/rootfs.tar")
    mkdir "$STAGE"
    mount -t tmpfs -o "mode=0755,size=$((tar_bytes + 512 * 1024 * 1024))" \
        envc-image "$STAGE" || die "cannot mount tmpfs on $STAGE"
    # Device nodes (mmdebstrap puts /dev/console, null, ... in the tarball)
    # cannot be made in a user namespace: they are left out here and made in
    # the disk by debugfs below, as root or not, so both lay out one disk.
    # A line: TYPE MODE UID GID MAJOR MINOR MTIME PATH.
    tar --list --verbose --numeric-owner --full-time -f "$WORK/rootfs.tar" |
        awk '$1 ~ /^[cb]/ {
            split($2, owner, "/"); split($3, dev, ",")
            mode = 0
            for (i = 2; i <= 10; i++) mode = mode * 2 + (substr($1, i, 1) != "-")
            printf "%s %o %s %s %s %s %s %s\n", substr($1, 1, 1), mode, owner[1], owner[2], dev[1], dev[2], $4 "T" $5 "Z", $6
        }' >"$WORK/devices" || die "cannot list the device nodes of rootfs.tar"
    excludes=()
    while read -r _ _ _ _ _ _ _ path; do
        case $path in
            ./dev/[a-z]*) excludes+=("--exclude=$path") ;;
            *) die "device node outside /dev, or of an unexpected name: $path" ;;
        esac
    done <"$WORK/devices"
    tar -C "$STAGE" --numeric-owner --xattrs --xattrs-include='*' \
        "${excludes[@]}" -xpf "$WORK/rootfs.tar" ||
        die "extracting rootfs.tar failed"

    # Kernel
    kernels=("$STAGE"/boot/vmlinuz-*)
    if [ ${#kernels[@]} -ne 1 ] || [ ! -f "${kernels[0]}" ]; then
        die "expected exactly one /boot/vmlinuz-* in the rootfs, found: ${kernels[*]##*/}"
    fi
    KVER=${kernels[0]##*/vmlinuz-}
    [ -s "$STAGE/lib/modules/$KVER/modules.dep" ] ||
        die "modules.dep missing for $KVER (depmod did not run)"
    grep -q '/virtio_net\.ko' "$STAGE/lib/modules/$KVER/modules.dep" ||
        die "virtio_net module missing for $KVER"
    install -m 0644 "${kernels[0]}" "$WORK/vmlinuz"
    printf '%s\n' "$KVER" >"$WORK/kernel-version"
    log "kernel $KVER"

    dpkg-query --admindir="$STAGE/var/lib/dpkg" -W \
        -f='${db:Status-Status} ${Package}=${Version}\n' |
        awk '$1 == "installed" { print $2 }' | sort >"$WORK/packages.txt"
    log "$(wc -l <"$WORK/packages.txt") packages installed"

    # ------------------------------------------------------------- disk.raw ---

    # Size: 2 GiB, or more if the rootfs needs it (used * 1.25 + 256 MiB,
    # rounded up to 512 MiB). Depends only on the content, so it is reproducible.
    used_mib=$(( $(du -sx -B1M "$STAGE" | cut -f1) ))
    size_mib=$(( (used_mib * 5 / 4 + 256 + 511) / 512 * 512 ))
    [ "$size_mib" -ge 2048 ] || size_mib=2048
    log "creating disk.raw (${size_mib} MiB ext4, rootfs uses ${used_mib} MiB)"

    # Pin mke2fs's defaults instead of reading the host's /etc/mke2fs.conf
    # (these are e2fsprogs 1.47.0's defaults for ext4).
    cat >"$WORK/mke2fs.conf" <<'EOF'
[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384

[fs_types]
	ext4 = {
		features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
EOF

    # E2FSPROGS_FAKE_TIME pins the superblock and new-inode timestamps.
    export E2FSPROGS_FAKE_TIME=$SDE
    DISK=$WORK/disk.raw
    MKE2FS_CONFIG=$WORK/mke2fs.conf mke2fs -q -F -t ext4 -T default \
        -U "$FS_UUID" -E "root_owner=0:0,hash_seed=$HASH_SEED" -L root \
        -d "$STAGE" "$DISK" "${size_mib}M" >"$WORK/mke2fs.log" 2>&1 || {
        tail -n 10 "$WORK/mke2fs.log" | sed 's/^/envc-image: mke2fs: /' >&2
        die "mke2fs failed"
    }

    # mke2fs -d copies each file's atime and ctime from the staging directory,
    # where they are the time of extraction. ctime cannot be set from user
    # space, so rewrite both in the image with debugfs. Inode numbers and
    # everything else are already deterministic.
    log "pinning atime/ctime of every inode"
    (
        cd "$STAGE"
        find . -print0 | while IFS= read -r -d '' p; do
            p=${p#.}
            [ -n "$p" ] || p=/
            case $p in
                *'"'* | *$'\n'*)
                    die "path not supported in image (contains '\"' or newline): $p" ;;
            esac
            printf 'sif "%s" atime %s\nsif "%s" ctime %s\n' "$p" "$SDE" "$p" "$SDE"
        done
        # The device nodes, with the tarball's modes, owners and mtimes.
        while read -r type mode uid gid major minor mtime path; do
            path=${path#.}
            if [ "$type" = c ]; then bits=020000; else bits=060000; fi
            # mknod takes a name in the current directory, not a path.
            printf 'cd "%s"\nmknod "%s" %s %s %s\ncd /\n' "${path%/*}" "${path##*/}" "$type" "$major" "$minor"
            printf 'sif "%s" mode 0%o\n' "$path" "$((bits | 8#$mode))"
            printf 'sif "%s" uid %s\nsif "%s" gid %s\n' "$path" "$uid" "$path" "$gid"
            printf 'sif "%s" mtime %s\n' "$path" "$(date -u -d "$mtime" +%s)"
            printf 'sif "%s" atime %s\nsif "%s" ctime %s\n' "$path" "$SDE" "$path" "$SDE"
        done <"$WORK/devices"
    ) >"$WORK/debugfs.cmds"
    debugfs -w -f "$WORK/debugfs.cmds" "$DISK" >/dev/null 2>"$WORK/debugfs.err" ||
        die "debugfs failed: $(head -n 5 "$WORK/debugfs.err")"
    # debugfs exits 0 even when a command fails; its only expected stderr line
    # is the version banner.
    if grep -v '^debugfs [0-9]' "$WORK/debugfs.err" | grep -q .; then
        grep -v '^debugfs [0-9]' "$WORK/debugfs.err" | head -n 5 |
            sed 's/^/envc-image: debugfs: /' >&2
        die "debugfs could not set timestamps"
    fi
    e2fsck -fn "$DISK" >"$WORK/e2fsck.log" 2>&1 || {
        sed 's/^/envc-image: e2fsck: /' "$WORK/e2fsck.log" | tail -n 20 >&2
        die "e2fsck found problems in disk.raw"
    }
    unset E2FSPROGS_FAKE_TIME

    umount "$STAGE"
}
export WORK SDE FS_UUID HASH_SEED
"${IN_NAMESPACE[@]}" bash -c "$(declare -f log die stage); stage" ||
    die "laying out disk.raw failed"
KVER=$(cat "$WORK/kernel-version")
size_mib=$(( $(stat -c %s "$WORK/disk.raw") / 1024 / 1024 ))

# ---------------------------------------------------------------- output ---

for f in rootfs.tar disk.raw vmlinuz kernel-version packages.txt; do
    chmod 0644 "$WORK/$f"
done
# disk.raw last: its presence marks a complete set.
for f in rootfs.tar vmlinuz kernel-version packages.txt disk.raw; do
    mv -f "$WORK/$f" "$OUT_DIR/$f"
done
log "done: $OUT_DIR (kernel $KVER, disk.raw ${size_mib} MiB)"
