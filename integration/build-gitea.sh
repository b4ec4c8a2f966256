#!/usr/bin/env bash
# Builds Gitea from the nested module integration/giteabin, once, into the
# user's cache directory, and prints the binary's path as the last line of
# stdout. The cache file name carries a hash of the module's go.mod, go.sum
# and main.go (and the target platform), so editing any of them makes the
# cached binary stale and the next run rebuilds it. A lock serialises
# concurrent runs: the second one waits and then reuses the first one's build.
# Progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/giteabin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/collab-lease"

version="$(sed -n 's/^const version = "\(.*\)"$/\1/p' "$src/main.go")"
if [ -z "$version" ]; then
	echo "build-gitea: cannot read the Gitea version from $src/main.go" >&2
	exit 1
fi
platform="$(go env GOOS)-$(go env GOARCH)"
hash="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" <(echo "$platform") | sha256sum | cut -c1-12)"
bin="$cache/gitea-$version-$hash"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/build.lock"
if ! flock -n 9; then
	echo "build-gitea: another build is running, waiting for it" >&2
	flock 9
fi

# The build we waited for may have produced exactly this binary.
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

echo "build-gitea: building Gitea $version ($platform) into $bin; a cold build takes a few minutes" >&2
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
start=$SECONDS
(
	cd "$src"
	CGO_ENABLED=1 go build -tags "sqlite sqlite_unlock_notify" -o "$tmp" .
) >&2
mv -f "$tmp" "$bin"
trap - EXIT
echo "build-gitea: built in $((SECONDS - start))s" >&2
echo "$bin"
