// Package shallow keeps long-lived goroutines' stacks small.
//
// A goroutine's stack keeps the depth its deepest call reached (a ledger
// write is deep: gorm, database/sql, the driver) until a collection
// shrinks it. An agent session's goroutines live as long as it does,
// mostly idle; so the deep calls of such a goroutine run on short-lived
// ones (Run), and a thousand idle sessions cost what their shallow loops
// do. It is no part of the lease domain: the lease service and the SSH
// transport both use it.
package shallow

// Run runs f on a goroutine of its own and waits for it.
func Run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}
