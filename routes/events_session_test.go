package routes

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A stream of a viewer signed in by a session cookie lasts only as long as
// the session: signing out ends it at once (the heartbeat here is an hour,
// so nothing else could), while anonymous streams go on.
func TestSigningOutEndsTheSessionsStreams(t *testing.T) {
	s := newLiveServer(t, StreamOptions{Heartbeat: time.Hour})
	cookie := s.sessionFor("alice")
	secret := "/api/v1/repos/acme/secret/leases/events"
	mine, r := s.open(secret, cookie)
	if mine == nil {
		t.Fatalf("alice's stream of her private repository: %d %s", r.Code, r.Body)
	}
	mine.next(t) // the stream's position
	anon, _ := s.open(eventsPath)
	anon.next(t)

	if r := s.do("POST", logoutPath, cookie, "Origin: "+giteaURL); r.Code != 200 {
		t.Fatalf("logout: %d %s", r.Code, r.Body)
	}
	mine.ended(t)
	s.acquire("bob", 7, time.Hour)
	if e := anon.next(t); e.event != "lease" { // still told of changes
		t.Fatalf("the anonymous stream after alice signed out: %+v", e)
	}
	if again, r := s.open(secret, cookie); again != nil || r.Code != 404 {
		t.Fatalf("the signed-out cookie opened a stream again: %d %s", r.Code, r.Body)
	}
}

// A session ended elsewhere (another browser's sign-out seen by another
// replica; here, through the service) ends the stream at the next check,
// one heartbeat later.
func TestASessionEndedElsewhereEndsItsStream(t *testing.T) {
	s := newLiveServer(t, StreamOptions{Heartbeat: 50 * time.Millisecond})
	st, r := s.open("/api/v1/repos/acme/secret/leases/events", s.sessionFor("alice"))
	if st == nil {
		t.Fatalf("alice's stream: %d %s", r.Code, r.Body)
	}
	st.next(t)
	if err := s.svc.EndSessions(context.Background(), s.user("alice")); err != nil {
		t.Fatal(err)
	}
	st.ended(t)
}

// The cap per address counts an IPv6 /64 as one client.
func TestStreamCapCountsAnIPv6PrefixAsOneClient(t *testing.T) {
	s := newStreams(StreamOptions{PerAddress: 1})
	ctx := context.Background()
	_, done, err := s.take(ctx, 0, "2001:db8:0:1::1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, _, err := s.take(ctx, 0, "2001:db8:0:1::ffff", false); !errors.Is(err, errTooManyStreams) {
		t.Fatalf("a second address of the same /64: %v, want errTooManyStreams", err)
	}
	_, done2, err := s.take(ctx, 0, "2001:db8:0:2::1", false)
	if err != nil {
		t.Fatalf("another /64: %v", err)
	}
	done2()
	_, done3, err := s.take(ctx, 0, "192.0.2.1", false)
	if err != nil {
		t.Fatalf("an IPv4 address: %v", err)
	}
	done3()
}

// Another site's page cannot sign a user out (a form posted with the
// cookie): a logout naming another Origin is refused and the session
// lives on; Gitea's pages, and programs that send no Origin, sign out.
func TestLogoutRefusesOtherSites(t *testing.T) {
	s := newLiveServer(t, StreamOptions{Heartbeat: time.Hour})
	cookie := s.sessionFor("alice")
	secret := "/api/v1/repos/acme/secret/leases/events"
	for _, o := range []string{"https://evil.example", "null"} {
		if r := s.do("POST", logoutPath, cookie, "Origin: "+o); r.Code != 403 {
			t.Fatalf("logout from %s: %d %s, want 403", o, r.Code, r.Body)
		}
	}
	mine, r := s.open(secret, cookie)
	if mine == nil {
		t.Fatalf("alice's session after the refused logouts: %d %s", r.Code, r.Body)
	}
	mine.next(t)
	if r := s.do("POST", logoutPath, cookie); r.Code != 200 {
		t.Fatalf("logout without an Origin: %d %s", r.Code, r.Body)
	}
	mine.ended(t)
}
