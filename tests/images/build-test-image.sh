#!/usr/bin/env bash
# Build the image the docker tests run, gbatch-test:latest, offline and without a pull:
# a rootfs holding only a static busybox (Debian's busybox-static) and its applet links,
# turned into an image with `docker import`. Skips the work when the image already exists.
#
# Usage: tests/images/build-test-image.sh        (needs a running docker engine)
# Env:   GBATCH_TEST_IMAGE (default gbatch-test:latest), BUSYBOX (default /bin/busybox)
set -euo pipefail

IMAGE="${GBATCH_TEST_IMAGE:-gbatch-test:latest}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"
DOCKER="${DOCKER:-docker}"

die() {
    echo "build-test-image: error: $*" >&2
    exit 1
}

"$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
    || die "the docker engine does not answer. Start it (as root: .ci/setup-docker.sh)."

if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build-test-image: $IMAGE already exists; nothing to do"
    exit 0
fi

[ -x "$BUSYBOX" ] \
    || die "no busybox at $BUSYBOX. Install it: apt-get install -y busybox-static."

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT

mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,proc,sys,dev,root,work}
chmod 1777 "$rootfs/tmp"
cp "$BUSYBOX" "$rootfs/bin/busybox"
chmod 0755 "$rootfs/bin/busybox"

# One symlink per applet the binary carries (sh, echo, sleep, cat, env, printenv, true,
# false, kill, ...), all in /bin so the image's PATH needs no thought.
applets="$("$rootfs/bin/busybox" --list)"
for applet in $applets; do
    [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
done
# Debian's busybox-static (1.35) has no printenv applet: a small sh stand-in does.
if [ ! -e "$rootfs/bin/printenv" ]; then
    cat >"$rootfs/bin/printenv" <<'SCRIPT'
#!/bin/sh
# printenv [NAME...]: busybox build without the applet (gbatch test image).
[ $# -eq 0 ] && exec env
status=0
for name in "$@"; do
    case $name in
        '' | [!A-Za-z_]* | *[!A-Za-z0-9_]*) status=1; continue ;;
    esac
    eval "if [ -n \"\${$name+x}\" ]; then printf '%s\\n' \"\$$name\"; else status=1; fi"
done
exit $status
SCRIPT
    chmod 0755 "$rootfs/bin/printenv"
fi
for required in sh echo sleep cat env printenv true false kill; do
    [ -x "$rootfs/bin/$required" ] || die "$BUSYBOX lacks the applet '$required'."
done

printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' \
    >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf - . \
    | "$DOCKER" import \
        --change 'ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin' \
        --change 'CMD ["/bin/sh"]' \
        --message 'gbatch test image: static busybox only' \
        - "$IMAGE" >/dev/null

# A dynamically linked busybox would import fine and fail on first use: prove it runs.
if ! out="$("$DOCKER" run --rm --network none "$IMAGE" sh -c 'echo ok' 2>&1)" \
    || [ "$out" != ok ]; then
    "$DOCKER" image rm -f "$IMAGE" >/dev/null 2>&1 || true
    die "the imported image does not run ($out). Is $BUSYBOX statically linked (busybox-static)?"
fi
echo "build-test-image: built $IMAGE"
