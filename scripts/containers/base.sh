#!/usr/bin/env bash
# Makes the Debian bookworm base image the Dockerfiles start FROM (docker.io/library/debian:bookworm)
# with debootstrap, for hosts that reach Debian's mirror but no image registry. The host's own extra CA
# certificates (/usr/local/share/ca-certificates, e.g. a TLS-inspecting egress proxy's) go into the
# base so builds inside reach PyPI, crates.io and Maven Central as the host does. Idempotent.
set -euo pipefail
IMAGE=docker.io/library/debian:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
podman image exists "$IMAGE" && exit 0
root=$(mktemp -d /var/tmp/bookworm.XXXXXX); trap 'rm -rf "$root"' EXIT
echo "[containers] debootstrap bookworm into $root (~30 s)" >&2
debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$MIRROR" > "$root.log" 2>&1 ||
  { tail -n 20 "$root.log" >&2; exit 1; }
rm -f "$root.log" "$root/etc/apt/sources.list"
cat > "$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates > /dev/null
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import - "$IMAGE" > /dev/null
echo "[containers] imported $IMAGE" >&2
