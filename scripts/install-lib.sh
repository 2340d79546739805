#!/usr/bin/env bash
# PGXS's INSTALL_SHLIB for our PostgreSQL libraries (scripts/install.sh passes it to `make install`):
# install-lib.sh SRC DEST. install(1) rewrites DEST in place, and a running backend that has the
# library mapped (a capturing session, a walsender decoding with the plugin) then dies of signal 11
# and PostgreSQL restarts in crash recovery. A rename leaves such backends on the old file; an
# unchanged library is left alone.
set -euo pipefail
src=$1 dest=$2
cmp -s "$src" "$dest" && exit 0
tmp="$dest.new.$$"
install -m 755 "$src" "$tmp"
mv -f "$tmp" "$dest"
