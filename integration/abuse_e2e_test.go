package integration

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// Abuse of the SSH port while legitimate agents work: 500 connections
// that never finish the handshake, connections that send garbage, a
// 1 MiB command line, an oversized one that fits in a packet, thousands of
// failed public-key attempts with keys Gitea does not know, and an
// authenticated client opening sessions it never uses. Throughout, a
// legitimate `ssh … collab-lease acquire` (OpenSSH) must keep succeeding,
// the sidecar's memory must stay bounded (its RSS, from /proc), the
// unfinished handshakes must be cut off by the handshake timeout (10 s),
// every connection offering unknown keys must be refused at
// authentication, and nothing may panic.

// procStatus reads VmRSS (in KiB) and Threads of a process.
func procStatus(pid int) (rssKiB, threads int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			rssKiB, _ = strconv.Atoi(fields[1])
		case "Threads:":
			threads, _ = strconv.Atoi(fields[1])
		}
	}
	return rssKiB, threads, sc.Err()
}

func TestAbuseEndToEnd(t *testing.T) {
	scale := leasemodel.Scale(t)
	const (
		stalled     = 500
		garbage     = 200
		rssLimitMiB = 256
	)
	var (
		authTries   = int64(3000 * scale) // unknown keys offered, six per connection
		idleSession = 2000 * scale        // sessions opened by one authenticated client and never used
	)
	// The abusers and the legitimate agent all connect from 127.0.0.1:
	// the per-address cap is raised so that the abusers stand for other
	// addresses, and it is the global limits (MaxStartups, MaxConns,
	// the handshake timeout) that must keep the agent served. The cap
	// per address has its own tests (ssh/lockout_test.go).
	s, w := newSidecar(t, "--max-conns-per-addr", "100000")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pid := s.PID()
	acquire := lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "1h")

	// Warm up, then take the baseline.
	expect(t, s.SSH(ctx, w.Alice.Key.Path, acquire), 0, "acquire before the abuse")
	baseRSS, baseThreads, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}

	// Watch the sidecar's memory while everything runs.
	var peakRSS, peakThreads atomic.Int64
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			if rss, th, err := procStatus(pid); err == nil {
				peakRSS.Store(max(peakRSS.Load(), int64(rss)))
				peakThreads.Store(max(peakThreads.Load(), int64(th)))
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	// 1. Connections that never finish the handshake: half say nothing,
	// half send a version line and stop there.
	// Each is watched from the start for the server hanging up on it.
	opened := time.Now()
	var cut, lastCut atomic.Int64
	var waitCut sync.WaitGroup
	for i := range stalled {
		c, err := net.Dial("tcp", s.SSHAddr)
		if err != nil {
			t.Fatalf("stalled connection %d: %v", i, err)
		}
		defer c.Close()
		if i%2 == 1 {
			_, _ = io.WriteString(c, "SSH-2.0-stall\r\n")
		}
		waitCut.Go(func() {
			_ = c.SetReadDeadline(opened.Add(30 * time.Second))
			_, err := io.Copy(io.Discard, c)
			if err == nil || !isTimeout(err) {
				cut.Add(1)
				lastCut.Store(max(lastCut.Load(), int64(time.Since(opened))))
			}
		})
	}

	var abuse sync.WaitGroup
	var garbageClosed atomic.Int64
	// 2. Garbage: random bytes, some after a valid version line.
	for i := range garbage {
		abuse.Go(func() {
			c, err := net.Dial("tcp", s.SSHAddr)
			if err != nil {
				t.Errorf("garbage connection: %v", err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			junk := make([]byte, 64<<10)
			_, _ = rand.Read(junk)
			if i%2 == 0 {
				copy(junk, "SSH-2.0-junk\r\n")
			}
			go func() { _, _ = c.Write(junk) }()
			if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
				garbageClosed.Add(1) // the server hung up on it
			}
		})
	}
	// 3. Failed public-key attempts with keys Gitea does not know.
	var authAttempts, authConns, authRefused atomic.Int64
	var otherErr atomic.Value
	hostKey, err := loadSigner(s.DataDir + "/ssh_host_ed25519_key")
	if err != nil {
		t.Fatal(err)
	}
	for range 16 {
		abuse.Go(func() {
			for authAttempts.Add(6) <= authTries {
				var signers []ssh.Signer
				for range 6 {
					_, priv, _ := ed25519.GenerateKey(rand.Reader)
					sg, _ := ssh.NewSignerFromKey(priv)
					signers = append(signers, sg)
				}
				authConns.Add(1)
				c, err := ssh.Dial("tcp", s.SSHAddr, &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)},
					HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()), Timeout: 30 * time.Second})
				if err == nil {
					_ = c.Close()
					t.Errorf("unknown keys were accepted")
					return
				}
				// Refused at authentication: after the 6th failed key
				// the server disconnects (MaxAuthTries); with fewer, the
				// client runs out of keys.
				if msg := err.Error(); strings.Contains(msg, "too many authentication failures") || strings.Contains(msg, "unable to authenticate") {
					authRefused.Add(1)
				} else {
					otherErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	// 4. Oversized command lines from an authenticated user.
	abuse.Go(func() {
		// 1 MiB through OpenSSH, as 16 words of 64 KiB: more than an SSH
		// packet may carry; the connection fails, nothing else does.
		words := []string{"collab-lease", "acquire"}
		for range 16 {
			words = append(words, strings.Repeat("a", 64<<10))
		}
		r := s.SSH(ctx, w.Bob.Key.Path, words...)
		if r.Code == 0 {
			t.Errorf("a 1 MiB command line succeeded: %q", r.Stdout)
		}
		t.Logf("1 MiB command line: exit %d, %q", r.Code, firstLine(r.Stderr))
		// The largest line that fits in one packet reaches the parser,
		// which refuses it in one short line.
		a, err := newAgent(s, w.Bob)
		if err != nil {
			t.Error(err)
			return
		}
		defer a.close()
		big, err := a.run(ctx, "collab-lease acquire "+strings.Repeat("b", 250<<10))
		if err != nil || big.Code != 1 || !strings.HasPrefix(big.Stderr, "error: usage: ") || len(big.Stderr) > 512 || big.Stdout != "" {
			t.Errorf("a 250 KiB command line: %v, exit %d, %d bytes of stderr: %.200q", err, big.Code, len(big.Stderr), big.Stderr)
		}
	})
	// 5. An authenticated client opens sessions and leaves them idle.
	idleOpened := 0
	abuse.Go(func() {
		a, err := newAgent(s, w.Carol)
		if err != nil {
			t.Error(err)
			return
		}
		defer a.close()
		c, err := a.conn(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for range idleSession {
			if _, err := c.NewSession(); err != nil {
				t.Logf("session %d refused: %v", idleOpened+1, err)
				break
			}
			idleOpened++
		}
	})

	// Meanwhile, the legitimate agent.
	var legit []time.Duration
	abuseDone := make(chan struct{})
	go func() { abuse.Wait(); close(abuseDone) }()
	for running := true; running; {
		select {
		case <-abuseDone:
			running = false
		default:
		}
		began := time.Now()
		r := s.SSH(ctx, w.Alice.Key.Path, acquire)
		if r.Code != 0 {
			t.Fatalf("a legitimate acquire failed during the abuse: %+v", r)
		}
		legit = append(legit, time.Since(began))
	}
	abuseTook := time.Since(opened)

	// The unfinished handshakes are cut off by the handshake timeout.
	waitCut.Wait()
	close(stopWatch)
	<-watchDone
	endRSS, endThreads, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, s.SSH(ctx, w.Alice.Key.Path, acquire), 0, "acquire after the abuse")

	slices.Sort(legit)
	t.Logf("abuse lasted %s: %d unfinished handshakes, %d garbage connections (%d hung up on), %d unknown keys offered on %d refused connections, %d idle sessions on one connection",
		abuseTook.Round(time.Millisecond), stalled, garbage, garbageClosed.Load(), min(authAttempts.Load(), authTries), authRefused.Load(), idleOpened)
	t.Logf("legitimate acquires during the abuse: %d, median %s, max %s", len(legit), legit[len(legit)/2].Round(time.Millisecond), legit[len(legit)-1].Round(time.Millisecond))
	t.Logf("sidecar RSS: %d MiB before, %d MiB at peak, %d MiB after; threads %d, %d, %d",
		baseRSS>>10, peakRSS.Load()>>10, endRSS>>10, baseThreads, peakThreads.Load(), endThreads)
	t.Logf("unfinished handshakes cut off: %d of %d, the last %s after they were opened", cut.Load(), stalled, time.Duration(lastCut.Load()).Round(time.Millisecond))

	if cut.Load() != stalled {
		t.Errorf("%d of %d unfinished handshakes were still open 30 s later: the handshake timeout is not applied", int64(stalled)-cut.Load(), stalled)
	}
	if garbageClosed.Load() != garbage {
		t.Errorf("only %d of %d garbage connections were hung up on", garbageClosed.Load(), garbage)
	}
	// Every connection offering unknown keys got as far as authentication
	// and was refused there (not cut off before, which would say nothing
	// about how unknown keys are treated).
	if authRefused.Load() != authConns.Load() {
		t.Errorf("only %d of %d connections offering unknown keys were refused at authentication; another ended in %v", authRefused.Load(), authConns.Load(), otherErr.Load())
	}
	// A sidecar built with the race detector (under make test) carries
	// its shadow memory too, about as much again: the bound doubles.
	limit := int64(rssLimitMiB)
	if raceEnabled {
		limit *= 2
	}
	if peakRSS.Load() > limit<<10 {
		t.Errorf("the sidecar's RSS peaked at %d MiB, over %d MiB", peakRSS.Load()>>10, limit)
	}
	if logs := s.Logs(); strings.Contains(logs, "panic") {
		t.Errorf("the sidecar panicked:\n%s", tail(logs, 60))
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
