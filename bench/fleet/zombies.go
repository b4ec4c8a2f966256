package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Zombies: agents frozen (SIGSTOP, as a hung model call or a paused
// container freezes them) right after their first push, and woken
// (SIGCONT) once the ledger's history shows their claim taken over; then
// they go on as a frozen agent would, pushing and merging. What of it
// lands is what the zombie run measures.

// zombie is one frozen agent and what happened to it.
type zombie struct {
	Agent        int
	Issue, Token int64 // the claim it was frozen holding
	workPID      int   // the work's process (its own process group)
	// trigger is the index, in the mode's events, of the push it was
	// frozen after: what it does to the issue after that is late.
	trigger int
	// From the mode's start: frozen, taken over (seen in the history),
	// woken.
	Frozen, TakenOver, Woke time.Duration
	ByToken                 int64  // the tenure that took the claim over
	ByAgent                 string // and its agent
	Err                     string // why it was woken without a takeover
}

// zombieStream keeps the choice of zombies apart from the other random
// numbers.
const zombieStream = 1<<62 + 2

// zombieCount is how many agents the zombie run freezes.
const zombieCount = 3

// pickZombies decides, from the seed, which agents the zombie run
// freezes (never all of them).
func pickZombies(seed int64, agents int) map[int]bool {
	rng := rand.New(rand.NewPCG(uint64(seed), zombieStream))
	out := map[int]bool{}
	for _, i := range rng.Perm(agents)[:min(zombieCount, agents-1)] {
		out[i] = true
	}
	return out
}

// historyPoll is how often the coordinator reads a frozen claim's history.
const historyPoll = 250 * time.Millisecond

// takenOver reads the ledger's history of repo#n (`collab-lease history`
// over SSH with key) until a tenure newer than token has begun, and
// returns it.
func (f *fleet) takenOver(ctx context.Context, key, repo string, n, token int64) (contract.TenureView, error) {
	for {
		r := f.sidecar.SSH(ctx, key, "collab-lease", "history", repo, strconv.FormatInt(n, 10), "--limit", "5")
		if r.Code == contract.ExitOK {
			var h contract.History
			if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil {
				return contract.TenureView{}, fmt.Errorf("history of %s#%d: %w: %q", repo, n, err, r.Stdout)
			}
			if len(h.Tenures) > 0 && h.Tenures[0].Token > token {
				return h.Tenures[0], nil
			}
		}
		select {
		case <-ctx.Done():
			return contract.TenureView{}, fmt.Errorf("history of %s#%d: no tenure after token %d: %w (last answer: exit %d %s)",
				repo, n, token, ctx.Err(), r.Code, lastLine(r.Stdout+r.Stderr))
		case <-time.After(historyPoll):
		}
	}
}
