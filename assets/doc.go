// Package assets embeds the badge script and stylesheet that Gitea's pages
// include, and the issue page's buttons' script that the badge script
// loads for a writer (static/, embedded and linked by assets.go). It holds
// static files only; no lease logic lives here.
package assets
