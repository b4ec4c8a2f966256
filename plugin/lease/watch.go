package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// watchRecheckTimeout bounds asking the forge again about a stream's
// viewer; it does not depend on the caller's context, whose deadline
// may be the transport's next heartbeat.
const watchRecheckTimeout = 30 * time.Second

// Watch is one viewer's stream of the lease changes of one repository,
// from the live hub's feed of it (plugin/live), filtered by what the
// viewer may see (access.go, mayWatch). It is used by one goroutine.
type Watch struct {
	s           *Service
	v           Viewer
	owner, name string
	r           forge.Repo // as the viewer was last seen to see it
	sub         *live.Sub
	first       []*live.Event // sent before what the feed hands on
	recheck     <-chan time.Time
	stop        func() bool
	closed      bool
}

// Watch starts a stream of the lease changes of owner/name that v may see
// (read access, as for List). lastID is the id of the last event the
// client saw ("" for none): the stream starts with what it missed since,
// or with a reset event when that is no longer known. Close it when done.
func (s *Service) Watch(ctx context.Context, v Viewer, owner, name, lastID string) (*Watch, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return nil, err
	}
	sub, err := s.hub.Subscribe(ctx, r.ID, lastID)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", r.FullName, err)
	}
	c, stop := s.after(s.recheck)
	return &Watch{s: s, v: v, owner: owner, name: name, r: r, sub: sub, first: sub.First, recheck: c, stop: stop}, nil
}

// Next returns the next event the viewer may see. It ends with ctx's
// error when ctx does; with live.ErrFellBehind when the stream was dropped for
// not keeping up; and with the error of the repository check (e.g.
// ErrRepoNotFound) once the viewer may no longer read the repository,
// which is asked again every live.Options.Recheck. While the forge cannot
// answer, the stream goes on as the viewer was last seen.
func (w *Watch) Next(ctx context.Context) (live.Event, error) {
	for {
		if len(w.first) > 0 {
			e := w.first[0]
			w.first = w.first[1:]
			if out, ok := w.visible(e); ok {
				return out, nil
			}
			continue
		}
		select {
		case e, ok := <-w.sub.C:
			if !ok {
				return live.Event{}, fmt.Errorf("watch %s: %w", w.r.FullName, live.ErrFellBehind)
			}
			if out, ok := w.visible(e); ok {
				return out, nil
			}
		case <-w.recheck:
			if err := w.check(ctx); err != nil {
				return live.Event{}, err
			}
			w.recheck, w.stop = w.s.after(w.s.recheck)
		case <-ctx.Done():
			return live.Event{}, ctx.Err()
		}
	}
}

// check asks again whether the viewer may read the repository.
func (w *Watch) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), watchRecheckTimeout)
	defer cancel()
	r, err := w.s.repo(ctx, w.v, w.owner, w.name)
	switch {
	case unanswered(err):
		return nil // as last seen, until the forge answers (or the address's budget refills)
	case err != nil:
		return err
	case r.ID != w.r.ID:
		// The name now leads to another repository (deleted and made
		// again): this stream was of the old one.
		return fmt.Errorf("%s/%s: %w", w.owner, w.name, ErrRepoNotFound)
	}
	w.r = r
	return nil
}

// visible is e as the viewer may see it (access.go, mayWatch).
func (w *Watch) visible(e *live.Event) (live.Event, bool) {
	switch mayWatch(w.r, e.Type, e.Kind()) {
	case watchShow:
		return *e, true
	case watchUnnumbered:
		out := *e
		out.Data = e.WithoutNumber()
		return out, true
	case watchReset:
		return live.Event{ID: e.ID, Type: contract.EventReset, Data: []byte("{}")}, true
	}
	return live.Event{}, false
}

// Close ends the stream. Closing twice does nothing.
func (w *Watch) Close() {
	if w.closed {
		return
	}
	w.closed = true
	w.stop()
	w.sub.Close()
}
