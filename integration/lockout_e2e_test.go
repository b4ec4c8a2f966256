package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// The lockout flood: while Gitea hangs, an outsider with keys of their
// own (Gitea knows none of them) opens a connection for every slot the
// sidecar has (1,024): each is let in to be told exit 75, and keeps itself
// alive. Agents whose keys the sidecar has cached keep being served
// throughout, and once Gitea answers again every agent is served within
// 1 s; the flood's connections are gone within their 10 s life whatever
// traffic they send. (--max-conns-per-addr is raised so that one test
// process can play an attacker with many addresses.)
func TestLockoutFloodDuringGiteaOutageEndToEnd(t *testing.T) {
	const (
		slots = 1024 // the sidecar's MaxConns
		bound = time.Second
	)
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	proxy, err := newHangProxy(strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.close()
	s, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: &Gitea{URL: "http://" + proxy.addr(), AdminToken: g.AdminToken},
		DataDir: t.TempDir() + "/data", Args: []string{"--forge-timeout", "2s", "--key-cache-ttl", "120s", "--perm-cache-ttl", "120s",
			"--max-conns-per-addr", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	renew := lease("renew", w.Widgets, w.OpenIssue, "--ttl", "1h")
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "1h")), 0, "acquire before the flood")

	proxy.hang(true)
	host, err := loadSigner(s.DataDir + "/ssh_host_ed25519_key")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		flood []*ssh.Client
		admit atomic.Int64
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 256)
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range flood {
			c.Close()
		}
	}()
	floodStart := time.Now()
	for range slots {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Error(err)
				return
			}
			signer, err := ssh.NewSignerFromKey(priv)
			if err != nil {
				t.Error(err)
				return
			}
			c, err := ssh.Dial("tcp", s.SSHAddr, &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
				HostKeyCallback: ssh.FixedHostKey(host.PublicKey()), Timeout: 30 * time.Second})
			if err != nil {
				return // refused or pushed out: the sidecar protects itself
			}
			admit.Add(1)
			mu.Lock()
			flood = append(flood, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("the flood took %v to open", time.Since(floodStart).Round(time.Millisecond))
	if admit.Load() < slots/2 {
		t.Fatalf("only %d of %d flood connections were let in: the flood did not fill the slots", admit.Load(), slots)
	}
	// They keep themselves alive.
	stopTraffic := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		for {
			mu.Lock()
			cs := append([]*ssh.Client(nil), flood...)
			mu.Unlock()
			for _, c := range cs {
				go func() { _, _, _ = c.SendRequest("keepalive@openssh.com", true, nil) }()
			}
			select {
			case <-stopTraffic:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	defer func() { close(stopTraffic); traffic.Wait() }()

	// During the outage, an agent whose key is cached is served (renew
	// needs nothing from Gitea).
	expect(t, run(t, s, w.Alice, renew), 0, "renew during the outage, amid the flood")

	proxy.hang(false)
	recovered := time.Now()
	for i, u := range []*User{w.Alice, w.Bob, w.Alice, w.Bob, w.Alice} {
		start := time.Now()
		cmd := renew
		want := 0
		if u == w.Bob {
			cmd, want = "collab-lease list "+w.Widgets.FullName(), 0
		}
		r := run(t, s, u, cmd)
		took := time.Since(start)
		if r.Code != want {
			t.Fatalf("agent %d (%s) after Gitea recovered, amid the flood: %+v", i, u.Login, r)
		}
		if took > bound {
			t.Errorf("agent %d (%s) after Gitea recovered took %v, want within %v", i, u.Login, took.Round(time.Millisecond), bound)
		}
	}
	t.Logf("%d flood connections let in; 5 agents served within %v of Gitea's recovery", admit.Load(), time.Since(recovered).Round(time.Millisecond))

	// Whatever traffic they send, the flood's connections end within
	// their 10 s life.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		open := 0
		for _, c := range flood {
			if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err == nil {
				open++
			}
		}
		mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d flood connections still open 20 s on", open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
