package main

import (
	"slices"
	"strings"
)

// Reservations name paths of the repository from its root; people name
// them from where they stand. git collab reads a glob or a path given in
// a subdirectory of the checkout as git reads a pathspec there: relative
// to that directory ("auth/**" in src/ is src/auth/**), "." and ".."
// resolved, and a leading ":/" for one from the root wherever it is
// given (":/docs/" is docs/). Only the sidecar reads a glob's wildcards.

// rootPath is p, a glob (glob) or a path given in directory prefix of
// the work tree (as Git.Prefix says it: "src/", or "" at the root), as a
// path from the repository's root. A glob that names a directory ("." or
// "..", or one ending in "/") ends in "/", the whole directory; one that
// names the root (".", or ":/" alone, as in git) is "**". A ".." above
// the root is a usage error, and so is a path (not a glob) that names
// the root: it names no file. What else is wrong with p is for the
// contract's rules to say, so p comes back as it is when it is empty or
// starts with "/".
func rootPath(prefix, p string, glob bool) (string, error) {
	given := p
	if rest, ok := strings.CutPrefix(p, ":/"); ok {
		p, prefix = rest, ""
		if p == "" {
			p = "."
		}
	}
	if p == "" || strings.HasPrefix(p, "/") {
		return p, nil
	}
	var segs []string
	dir := false
	for _, s := range strings.Split(prefix+p, "/") {
		dir = s == "" || s == "." || s == ".."
		switch s {
		case "", ".":
		case "..":
			if len(segs) == 0 {
				return "", usagef("%s is above the repository's root; name a path inside it (:/<path> names one from the root)", quote(given))
			}
			segs = segs[:len(segs)-1]
		default:
			segs = append(segs, s)
		}
	}
	out := strings.Join(segs, "/")
	switch {
	case !glob && out == "":
		return "", usagef("%s names the repository's root, not a path in it; name a file or leave --path out to list every reservation", quote(given))
	case !glob || !dir:
	case out == "":
		out = "**"
	default:
		out += "/"
	}
	return out, nil
}

// rootGlobs are globs given in directory prefix, from the root (rootPath).
func rootGlobs(prefix string, globs []string) ([]string, error) {
	out := make([]string, len(globs))
	for i, g := range globs {
		var err error
		if out[i], err = rootPath(prefix, g, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fromRoot is inv with its globs and its --path named from the
// repository's root, read from where git collab runs in the work tree.
// What names none is inv as it is, and git is not asked.
func (a *app) fromRoot(inv Invocation) (Invocation, error) {
	path := slices.IndexFunc(inv.Flags, func(f Flag) bool { return f.Name == "--path" })
	if len(inv.Globs) == 0 && len(inv.Reserve) == 0 && path < 0 {
		return inv, nil
	}
	prefix, err := a.git.Prefix()
	if err != nil {
		return inv, err
	}
	if inv.Globs, err = rootGlobs(prefix, inv.Globs); err != nil {
		return inv, err
	}
	if inv.Reserve, err = rootGlobs(prefix, inv.Reserve); err != nil {
		return inv, err
	}
	if path >= 0 {
		inv.Flags = slices.Clone(inv.Flags)
		if inv.Flags[path].Value, err = rootPath(prefix, inv.Flags[path].Value, false); err != nil {
			return inv, err
		}
	}
	return inv, nil
}
