package main

// The files of the data directory, named once: serve creates what it
// needs, install writes the OAuth2 credentials, doctor checks their modes.
const (
	oauthAppFile = "oauth2.json" // the OAuth2 application install registered
)
