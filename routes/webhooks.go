package routes

// WebhookPath is where Gitea delivers its system webhook (SPEC §8.3),
// under the sidecar's public URL or the --webhook-url base.
const WebhookPath = "/hooks/gitea"
