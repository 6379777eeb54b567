#!/bin/sh
# Builds the two local base images deploy/Dockerfile can start from where docker.io cannot be
# pulled: a Debian bookworm root file system made by debootstrap, imported into podman's storage.
#   ur-base:bookworm-slim  the runtime stage's base: Debian's python3 (3.11) and CA certificates
#   ur-base:bookworm       the builder stage's base: the same plus python3-venv, python3-dev and
#                          build-essential (the compilers llama-cpp-python builds with), git, curl
# Both hold the interpreter at /usr/bin/python3, so the virtualenv made in the builder runs
# unchanged in the runtime stage. An image already in storage is kept (delete it to rebuild).
# Usage: deploy/image/base.sh [TAG_PREFIX]   (default localhost/ur-base; needs root: debootstrap)
set -eu

PREFIX=${1:-localhost/ur-base}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SLIM_PACKAGES=python3,ca-certificates
FULL_PACKAGES="python3-venv python3-dev build-essential pkg-config git curl"

if podman image exists "$PREFIX:$SUITE-slim" && podman image exists "$PREFIX:$SUITE"; then
    echo "base images $PREFIX:$SUITE-slim and $PREFIX:$SUITE already built"
    exit 0
fi

ROOTFS=$(mktemp -d /var/tmp/ur-rootfs.XXXXXX)
# The root file system holds device nodes and root-owned files: removed on any exit.
trap 'rm -rf "$ROOTFS"' EXIT

debootstrap --variant=minbase --include="$SLIM_PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >/dev/null
# What the public python images also set: UTF-8 without a locale package, apt without its caches.
printf 'LANG=C.UTF-8\n' >"$ROOTFS/etc/default/locale"
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb
import_rootfs() {
    tar -C "$ROOTFS" -c . | podman import --quiet --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$1" >/dev/null
    echo "imported $1"
}
import_rootfs "$PREFIX:$SUITE-slim"

# The builder's extra packages go into the same tree: one debootstrap for both images.
mount -t proc proc "$ROOTFS/proc"
# (`|| true`: under set -e a failed umount would end the trap before the rm.)
trap 'umount "$ROOTFS/proc" 2>/dev/null || true; rm -rf "$ROOTFS"' EXIT
chroot "$ROOTFS" apt-get update -qq
# shellcheck disable=SC2086  # a word list on purpose
DEBIAN_FRONTEND=noninteractive chroot "$ROOTFS" apt-get install -y -qq --no-install-recommends $FULL_PACKAGES >/dev/null
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/*
umount "$ROOTFS/proc"
import_rootfs "$PREFIX:$SUITE"
