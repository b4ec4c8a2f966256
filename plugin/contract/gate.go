package contract

// The gate: what the pre-receive hook program (cmd/collab-gate-hook) and
// the sidecar agree on. Gitea runs the hook on every push and merge; the
// hook asks the sidecar's admin listener one question per push and exits
// by the answer (docs/operating.md, The gate).

// GatePath is where the sidecar's admin listener answers the hook's
// question (POST, a GateQuestion in JSON, GateSecretHeader carrying the
// gate's secret); GatePingPath answers an authenticated GET with 204, so
// that doctor can tell whether the hook reaches the sidecar.
const (
	GatePath         = "/gate/v1/push"
	GatePingPath     = "/gate/v1/ping"
	GateSecretHeader = "X-Collab-Lease-Gate"
)

// The files of the gate. The sidecar keeps, below Gitea's repository
// root, a directory GateDir holding the hook program (GateProgram), its
// configuration (GateConfigFile, a GateConfig in JSON) and the secret it
// authenticates with (GateSecretFile); in each repository it adds one
// script, hooks/pre-receive.d/GateScript, that runs the program.
const (
	GateDir        = ".collab-lease"
	GateProgram    = "collab-gate-hook"
	GateConfigFile = "gate.json"
	GateSecretFile = "gate.secret"
	GateScript     = "collab-lease"
)

// GateConfig is the hook's configuration, written by the sidecar.
type GateConfig struct {
	// URL is the base URL of a sidecar's admin listener (any replica, or
	// a load balancer in front of them), as the hook reaches it.
	URL string `json:"url"`
	// Unreachable is what the hook does when no answer came within
	// TimeoutMS: GateAllow or GateRefuse.
	Unreachable string `json:"unreachable"`
	// TimeoutMS bounds the question, in milliseconds (2000 by default).
	TimeoutMS int64 `json:"timeout_ms"`
}

// The values of GateConfig.Unreachable (serve --gate-unreachable).
const (
	GateAllow  = "allow"
	GateRefuse = "refuse"
)

// The lines the hook prints itself, when the sidecar did not answer.
const (
	GateUnansweredAllowed = "collab-lease: the sidecar did not answer; this push was not checked"
	GateUnansweredRefused = "collab-lease: the sidecar did not answer; this push was refused"
)

// GatePushOption is the push option's key: -o collab-lease=<issue>:<token>.
const GatePushOption = "collab-lease"

// MaxGateRefs bounds the refs of one question, and MaxGateOptions its
// push options; MaxGateQuestion bounds its encoded size, and
// MaxGateAnswer the encoded size of the answer the hook reads.
const (
	MaxGateRefs     = 10000
	MaxGateOptions  = 100
	MaxGateQuestion = 4 << 20
	MaxGateAnswer   = 4 << 20
)

// GateTimeoutMS is GateConfig.TimeoutMS when it is 0.
const GateTimeoutMS = 2000

// GateQuestion is the hook's question about one push, from the
// environment Gitea gives its hooks and the lines on their stdin.
type GateQuestion struct {
	RepoID    int64  `json:"repo_id"`    // GITEA_REPO_ID
	Owner     string `json:"owner"`      // GITEA_REPO_USER_NAME
	Repo      string `json:"repo"`       // GITEA_REPO_NAME
	PusherID  int64  `json:"pusher_id"`  // GITEA_PUSHER_ID
	Pusher    string `json:"pusher"`     // GITEA_PUSHER_NAME
	KeyID     int64  `json:"key_id"`     // GITEA_KEY_ID, over SSH; 0 otherwise
	Trigger   string `json:"trigger"`    // GITEA_PUSH_TRIGGER ("pr-merge-to-base" for a merge)
	PullIndex int64  `json:"pull_index"` // GITEA_PR_INDEX, for a merge
	Internal  bool   `json:"internal"`   // GITEA_INTERNAL_PUSH=true
	// Options are the push options (GIT_PUSH_OPTION_<n>), in order.
	Options []string `json:"options"`
	// Refs are the lines of the hook's stdin.
	Refs []GateRef `json:"refs"`
	// Paths are the paths the push's new commits change (those no ref
	// reached before the push), for path reservations, at most
	// MaxGatePaths; past that, PathsAreDirs: the directories of those
	// paths instead (a directory "a/b" stands for everything under it),
	// at most MaxGatePaths of them. Empty for an internal push and a
	// merge, which are not checked.
	Paths        []string `json:"paths,omitempty"`
	PathsAreDirs bool     `json:"paths_are_dirs,omitempty"`
}

// MaxGatePaths bounds the paths (or directories) of one question.
const MaxGatePaths = 10000

// GateRef is one "<old> <new> <ref>" line of a push.
type GateRef struct {
	Old  string `json:"old"`
	New  string `json:"new"`
	Name string `json:"name"` // refs/heads/<branch>, refs/tags/<tag>, …
}

// GateAnswer is the sidecar's answer: whether the push goes in, and the
// lines the pusher reads (as "remote: <line>"), at most one per ref.
type GateAnswer struct {
	Allow bool     `json:"allow"`
	Lines []string `json:"lines"`
}
