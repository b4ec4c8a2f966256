#!/usr/bin/env bash
# Builds upstream git, once, into the user's cache directory, and prints
# the path of its git binary as the last line of stdout. The fleet
# benchmark's Gitea runs this git: Gitea tests a pull request's
# mergeability with `git merge-tree` from git 2.40 on, and with a
# temporary clone of the repository (seconds each, one at a time) before,
# and Debian bookworm packages git 2.39.
#
# The source is Debian's upstream tarball, checked against its SHA-256.
# The install directory's name carries a hash of the version, the build
# options and the platform, so changing any of them makes the next run
# build afresh; a file written last (.built) marks an install as whole. A
# lock serialises concurrent runs: the second one waits and then reuses
# the first one's build. Progress goes to stderr.
set -euo pipefail

version=2.47.3
url="http://deb.debian.org/debian/pool/main/g/git/git_$version.orig.tar.xz"
sha256=9c2eb1250781b3e5bfef098572d07fdf132d67e6c065e4307332ade9819a1501
# No Tcl/Tk (gitk, git gui), translations, Perl or Python commands: Gitea
# needs none of them. HTTP transport is built (libcurl, expat).
options="NO_TCLTK=1 NO_GETTEXT=1 NO_PERL=1 NO_PYTHON=1 INSTALL_SYMLINKS=1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/collab-lease"

fail() {
	echo "build-git: $*" >&2
	exit 1
}

platform="$(uname -s)-$(uname -m)"
hash="$(printf '%s\n' "$version" "$sha256" "$options" "$platform" | sha256sum | cut -c1-12)"
prefix="$cache/git-$version-$hash"
bin="$prefix/bin/git"

if [ -f "$prefix/.built" ] && [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/build-git.lock"
if ! flock -n 9; then
	echo "build-git: another build is running, waiting for it" >&2
	flock 9
fi

# The build we waited for may have produced exactly this install.
if [ -f "$prefix/.built" ] && [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

# The headers and tools the build needs, by the Debian package that has
# them: installed with apt-get when run as root (as .ci/run does), else
# named in the error.
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v curl-config >/dev/null 2>&1 || need+=(libcurl4-gnutls-dev)
[ -f /usr/include/expat.h ] || need+=(libexpat1-dev)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		fail "building git $version needs ${need[*]} (Debian package names); install them and run again"
	fi
	echo "build-git: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; } >&2 ||
		fail "apt-get install ${need[*]} failed (above)"
fi

tarball="$cache/git_$version.orig.tar.xz"
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
	echo "build-git: downloading $url" >&2
	curl -fsSL -o "$tarball.tmp.$$" "$url" || { rm -f "$tarball.tmp.$$"; fail "cannot download $url"; }
	if ! echo "$sha256  $tarball.tmp.$$" | sha256sum -c --status; then
		rm -f "$tarball.tmp.$$"
		fail "$url does not have SHA-256 $sha256"
	fi
	mv -f "$tarball.tmp.$$" "$tarball"
fi

echo "build-git: building git $version into $prefix; this takes a few minutes" >&2
work="$(mktemp -d "$cache/git-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
tar -xJf "$tarball" -C "$work" --strip-components=1 || fail "cannot unpack $tarball"
# A half-finished install of an earlier run is not reused.
rm -rf "$prefix"
jobs="$(nproc 2>/dev/null || echo 2)"
# shellcheck disable=SC2086 # options is a list of make variables
make -C "$work" prefix="$prefix" $options -j"$jobs" all install >&2 ||
	fail "make of git $version failed (above)"
got="$("$bin" version)" || fail "the built $bin does not run"
[ "$got" = "git version $version" ] || fail "the built $bin says \"$got\", not git version $version"
touch "$prefix/.built"
echo "build-git: built in $((SECONDS - start))s" >&2
echo "$bin"
