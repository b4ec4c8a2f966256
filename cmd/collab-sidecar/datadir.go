package main

// The files of the data directory (--data-dir), named once: serve creates
// the ledger, host key and session key, install writes the OAuth2
// credentials, doctor checks that only their owner may read them.
const (
	ledgerFile     = "collab.db"            // the lease ledger (unless --db says otherwise)
	hostKeyFile    = "ssh_host_ed25519_key" // the SSH server's host key
	sessionKeyFile = "session.key"          // signs the HTTP session and sign-in cookies
	oauthAppFile   = "oauth2.json"          // the OAuth2 application install registered
	// webhookSecretFile holds the secret Gitea signs its webhook
	// deliveries with (hex); install creates it, serve reads it.
	webhookSecretFile = "webhook.secret"
)

// secretFiles are the data directory's files that must stay private.
var secretFiles = []string{hostKeyFile, sessionKeyFile, oauthAppFile, webhookSecretFile}
