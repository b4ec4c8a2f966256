package forge

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A Budget is what one request may still ask of the forge: the share of
// the address it came from. An outsider can make the sidecar ask Gitea
// things without any credential (a junk token, a repository that does not
// exist, a sign-in callback), and Gitea's connections are few and shared
// with every agent; so each address gets a rate of forge requests of its
// own, and a request past it is answered ErrRateLimited without asking.
// Answers from the forge's caches cost nothing.
//
// The budget travels in the request's context because it belongs to that
// request only, like its deadline: the forge client asks it before every
// request it sends (see BudgetFrom).
type Budget interface {
	// Allow reports whether one more forge request may be sent now.
	Allow() bool
}

type budgetKey struct{}

// WithBudget returns ctx carrying b.
func WithBudget(ctx context.Context, b Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// BudgetFrom returns the budget ctx carries, or nil (no limit: the
// sidecar's own work, and SSH, whose connections are capped instead).
func BudgetFrom(ctx context.Context) Budget {
	b, _ := ctx.Value(budgetKey{}).(Budget)
	return b
}

// AddrBudgets hands out one token bucket per client address: Rate forge
// requests per second, Burst at once. IPv6 addresses share a bucket per
// /64, since one host usually holds a whole /64. Buckets unused for
// idleAfter are dropped, which bounds the memory by the addresses active
// in that time.
type AddrBudgets struct {
	rate  rate.Limit
	burst int
	clock func() time.Time

	mu      sync.Mutex
	buckets map[netip.Prefix]*addrBucket
	swept   time.Time
}

type addrBucket struct {
	lim  *rate.Limiter
	used time.Time
}

// idleAfter is how long an address's bucket is kept after its last use;
// by then a bucket is full again anyway.
const idleAfter = 5 * time.Minute

// NewAddrBudgets returns budgets of perSecond forge requests per second
// per address, with bursts of burst. perSecond <= 0 means no limit (For
// returns nil). clock nil means time.Now.
func NewAddrBudgets(perSecond float64, burst int, clock func() time.Time) *AddrBudgets {
	if clock == nil {
		clock = time.Now
	}
	return &AddrBudgets{rate: rate.Limit(perSecond), burst: max(burst, 1), clock: clock,
		buckets: map[netip.Prefix]*addrBucket{}}
}

// For returns the budget of the client at addr (an IP address, as
// net/http's RemoteAddr host or gin's ClientIP gives it); nil when budgets
// are off or addr is not an IP address (then the caller has no address to
// charge, e.g. a Unix socket, and is not limited).
func (a *AddrBudgets) For(addr string) Budget {
	if a == nil || a.rate <= 0 {
		return nil
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return nil
	}
	p := ClientPrefix(ip)
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.swept) > idleAfter {
		for k, b := range a.buckets {
			if now.Sub(b.used) > idleAfter {
				delete(a.buckets, k)
			}
		}
		a.swept = now
	}
	b := a.buckets[p]
	if b == nil {
		b = &addrBucket{lim: rate.NewLimiter(a.rate, a.burst)}
		a.buckets[p] = b
	}
	b.used = now
	return clockedBudget{lim: b.lim, clock: a.clock}
}

// ClientPrefix is one client as the limits per address count it (the
// Gitea budgets here, SSH connections, live event streams): its IPv4
// address, or the /64 of its IPv6 address, since one host usually holds a
// whole /64 and could otherwise take a new address for every try.
func ClientPrefix(ip netip.Addr) netip.Prefix {
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// clockedBudget asks the bucket on the budgets' clock, so tests can
// refill it by moving a fake clock instead of waiting.
type clockedBudget struct {
	lim   *rate.Limiter
	clock func() time.Time
}

func (b clockedBudget) Allow() bool { return b.lim.AllowN(b.clock(), 1) }
