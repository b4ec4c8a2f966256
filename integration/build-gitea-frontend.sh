#!/usr/bin/env bash
# Builds Gitea's production frontend (the JS and CSS, with whatever they load,
# that Gitea serves under /assets/ and that its Go module does not carry),
# once, into the user's cache directory, and prints that directory as the last
# line of stdout. Tests do not need it: without it integration/gitea.go serves
# empty stand-ins and pages render unstyled; with it, they render as a real
# Gitea's do.
#
# The build copies what it needs of the code.gitea.io/gitea module that
# integration/giteabin builds into a temporary directory, installs the
# frontend's dependencies there from the npm registry with the pnpm version
# Gitea pins, and runs `vite build` (Gitea's `make frontend`). Gitea wants
# Node >= 22.18 (its vite.config.ts uses fs.globSync); an older system Node
# is replaced, for this build only, by Node from the registry's
# node-<platform> package.
#
# Besides Gitea's content-hashed files, the cache directory has links by the
# unhashed names Gitea's templates ask for (js/index.js -> js/index.<hash>.js,
# css/index.css, …; not the themes, which Gitea would list twice), so that
# these names are served with this build as with the empty stand-ins.
#
# The cache directory's name carries a hash of the Gitea module's go.sum
# lines and of this script, so a new Gitea version or a changed recipe makes
# a new build. A lock serialises concurrent runs: the second one waits and
# then reuses the first one's build. Progress goes to stderr.
#
#   build-gitea-frontend.sh               build if needed, print the directory
#   build-gitea-frontend.sh --print-path  print the directory, build nothing
set -euo pipefail

node_version=22.23.5 # used when the system Node is older than Gitea needs
node_min=22.18.0     # Gitea's package.json "engines"
pnpm_version=10.33.0 # Gitea's package.json "packageManager"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"
mod="$here/giteabin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/collab-lease"

version="$(sed -n 's/^const version = "\(.*\)"$/\1/p' "$mod/main.go")"
if [ -z "$version" ]; then
	echo "build-gitea-frontend: cannot read the Gitea version from $mod/main.go" >&2
	exit 1
fi
hash="$(cat <(grep '^code\.gitea\.io/gitea ' "$mod/go.sum") "$self" | sha256sum | cut -c1-12)"
out="$cache/gitea-frontend-$version-$hash"

if [ "${1:-}" = "--print-path" ]; then
	echo "$out"
	exit 0
fi
if [ $# -gt 0 ]; then
	echo "usage: $0 [--print-path]" >&2
	exit 2
fi

if [ -f "$out/.vite/manifest.json" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/frontend.lock"
if ! flock -n 9; then
	echo "build-gitea-frontend: another build is running, waiting for it" >&2
	flock 9
fi

# The build we waited for may have produced exactly this directory.
if [ -f "$out/.vite/manifest.json" ]; then
	echo "$out"
	exit 0
fi

start=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/collab-lease-gitea-frontend.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work" "$out.tmp.$$"' EXIT

# Tools: pnpm as Gitea pins it, and Node >= node_min.
newer_or_equal() { # newer_or_equal A B: version A >= version B
	[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "build-gitea-frontend: needs node and npm on PATH" >&2
	exit 1
fi
system_node="$(node -p 'process.versions.node')"
tools="$cache/frontend-tools-pnpm-$pnpm_version"
node_pkg=""
if ! newer_or_equal "$system_node" "$node_min"; then
	node_pkg="node-$(node -p 'process.platform + "-" + process.arch')"
	tools="$tools-$node_pkg-$node_version"
fi
if [ ! -x "$tools/node_modules/.bin/pnpm" ] || { [ -n "$node_pkg" ] && [ ! -x "$tools/node_modules/.bin/node" ]; }; then
	what="pnpm $pnpm_version"
	if [ -n "$node_pkg" ]; then
		what="$what and Node $node_version ($node_pkg: the system Node $system_node is older than $node_min)"
	fi
	echo "build-gitea-frontend: installing $what" >&2
	rm -rf "$tools.tmp.$$"
	mkdir -p "$tools.tmp.$$"
	npm install --prefix "$tools.tmp.$$" --no-save --no-audit --no-fund --loglevel=error \
		"pnpm@$pnpm_version" ${node_pkg:+"$node_pkg@$node_version"} >&2
	rm -rf "$tools"
	mv "$tools.tmp.$$" "$tools"
fi
export PATH="$tools/node_modules/.bin:$PATH"
echo "build-gitea-frontend: Node $(node -p 'process.versions.node'), pnpm $(pnpm --version)" >&2

# The Gitea module's source, as the go command keeps it (read-only).
src="$(cd "$mod" && go mod download -json code.gitea.io/gitea | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [ -z "$src" ] || [ ! -f "$src/package.json" ]; then
	echo "build-gitea-frontend: cannot find the code.gitea.io/gitea module source (go mod download)" >&2
	exit 1
fi

echo "build-gitea-frontend: building Gitea $version's frontend into $out; a cold build takes about a minute" >&2
# What the build reads: the package files, the Vite, Tailwind and TypeScript
# configuration, the sources, the SVGs and JSON under public/ and assets/
# that the sources import, and the templates and Go files in which Tailwind
# looks for the class names it must generate.
(
	cd "$src"
	cp -R --parents package.json pnpm-lock.yaml .npmrc vite.config.ts tailwind.config.ts \
		tsconfig.json types.d.ts assets public web_src templates "$work/"
	find build models modules routers services -name '*.go' ! -name '*_test.go' \
		-exec cp --parents -t "$work/" {} +
)
chmod -R u+w "$work"
shipped="$(cd "$work/public/assets" && ls -A)" # not build output

(
	cd "$work"
	# Only the dependencies: the build needs none of the linters and test tools.
	pnpm install --frozen-lockfile --prod --store-dir "$cache/pnpm-store" --reporter=append-only
	NODE_ENV=production pnpm exec vite build
) >&2

if [ ! -f "$work/public/assets/.vite/manifest.json" ]; then
	echo "build-gitea-frontend: vite build wrote no public/assets/.vite/manifest.json" >&2
	exit 1
fi
# Links by unhashed name, found as Gitea finds them (modules/public/manifest.go).
(
	cd "$work/public/assets"
	node --input-type=module -e '
		import {readFileSync, symlinkSync, existsSync} from "node:fs";
		import {posix as path} from "node:path";
		const manifest = JSON.parse(readFileSync(".vite/manifest.json", "utf8"));
		for (const e of Object.values(manifest)) {
			if (!e.isEntry || !e.name || e.name.startsWith("theme-")) continue;
			for (const file of [e.file, ...(e.css || [])]) {
				const alias = path.join(path.dirname(file), e.name + path.extname(file));
				if (!existsSync(alias)) symlinkSync(path.basename(file), alias);
			}
		}'
)
rm -rf "$out.tmp.$$"
mkdir -p "$out.tmp.$$"
for f in "$work/public/assets/"* "$work/public/assets/".[!.]*; do
	[ -e "$f" ] || continue
	name="$(basename "$f")"
	if ! grep -qxF "$name" <<<"$shipped"; then
		mv "$f" "$out.tmp.$$/"
	fi
done
mv -T "$out.tmp.$$" "$out"
echo "build-gitea-frontend: built in $((SECONDS - start))s ($(du -sh "$out" | cut -f1))" >&2
echo "$out"
