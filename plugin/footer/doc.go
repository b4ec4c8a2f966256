// Package footer installs the sidecar's badge script and stylesheet into
// Gitea's custom footer template ($GITEA_CUSTOM/templates/custom/
// footer.tmpl), between two marker comments, keeping byte for byte
// whatever else the admin has there (footer.go); and removes them again.
// Its file system side (fs.go) refuses, unless forced, links and files of
// a third account below Gitea's custom directory, replaces the file
// atomically and serialises concurrent installs with a lock on the
// directory.
//
// It writes only the footer file and talks to nothing else: not to Gitea
// (plugin/gitea registers the OAuth2 application and the webhook), not to
// the ledger.
package footer
