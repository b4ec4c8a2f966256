// Package assets embeds the badge script and stylesheet that Gitea's pages
// include (static/, embedded by assets.go). It holds static files only; no
// lease logic lives here.
package assets
