package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// Two replicas on one fresh PostgreSQL database, behind HAProxy run with
// deploy/ha/haproxy.cfg as it ships (only its addresses come from the
// environment), against the real Gitea. The replicas require PROXY
// headers from the balancer (--proxy-protocol-from 127.0.0.1) and allow
// one SSH connection per client address; clients connect to HAProxy from
// addresses of their own (127.0.0.2 and up). Through the balancer: the
// real OpenSSH client gets either replica and the same host key;
// twenty racers get exactly one winner; each replica logs each racer's
// own address; a client's second connection is refused at both replicas
// while another client still gets in; HTTP answers; and with Gitea down,
// when no replica is ready, the replicas still answer through it.
func TestReplicasBehindHAProxy(t *testing.T) {
	db := pgtest.NewDatabase(t)
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("HAProxy is required for the load balancer test (apt-get install haproxy)")
	}
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	keys := t.TempDir()
	hostKey, sessionKey := filepath.Join(keys, "ssh_host_key"), filepath.Join(keys, "session.key")
	replicas := make([]*Sidecar, 2)
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			replicas[i], errs[i] = StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g,
				DataDir: filepath.Join(t.TempDir(), fmt.Sprint("replica", i)), HostKey: hostKey,
				Args: []string{"--db", db, "--session-key", sessionKey,
					"--proxy-protocol-from", "127.0.0.1", "--max-conns-per-addr", "1"}})
		})
	}
	wg.Wait()
	for i, s := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		stopAtEnd(t, s)
	}
	lb := startHAProxy(t, haproxy, replicas)

	// OpenSSH through the balancer, checking the one host key: HAProxy
	// takes turns among replicas of equal load, so one command after
	// another reaches both.
	for i := 2; i <= 5; i++ {
		expect(t, lb.ssh(ctx, w.Alice, fmt.Sprintf("127.0.0.%d", i), "collab-lease help"), 0, "help through the balancer")
	}
	for i, s := range replicas {
		if !regexp.MustCompile(`user=alice verb=help .* remote=127\.0\.0\.[2-5]:`).MatchString(s.Logs()) {
			t.Fatalf("replica %d served no command through the balancer, or not as the client's address:\n%s", i, tail(s.Logs(), 20))
		}
	}

	// Twenty racers, each from an address of its own.
	n := w.OpenIssue
	racers := racerUsers(t, ctx, g, w, 50)[:20]
	results := make([]SSHResult, len(racers))
	for i, u := range racers {
		wg.Go(func() {
			results[i] = lb.ssh(ctx, u, racerAddr(i), lease("acquire", w.Widgets, n, "--ttl", "10m"))
		})
	}
	wg.Wait()
	winner := oneWinner(t, racers, results, func(i int) string { return " from " + racerAddr(i) })
	served := make([]int, len(replicas))
	for i, u := range racers {
		line := regexp.MustCompile(`user=` + u.Login + ` verb=acquire .* remote=` + regexp.QuoteMeta(racerAddr(i)) + `:`)
		found := false
		for r, s := range replicas {
			if line.MatchString(s.Logs()) {
				found = true
				served[r]++
			}
		}
		if !found {
			t.Fatalf("no replica logged %s's acquire from %s", u.Login, racerAddr(i))
		}
	}
	t.Logf("racers served per replica: %v", served)
	if served[0] == 0 || served[1] == 0 {
		t.Fatalf("racers served per replica: %v; want both to serve some", served)
	}
	for i, s := range replicas {
		if strings.Contains(s.Logs(), "remote=127.0.0.1:") {
			t.Fatalf("replica %d took the balancer for a client:\n%s", i, tail(s.Logs(), 20))
		}
	}

	// One connection per address: 127.0.0.2 holds one at each replica,
	// then its next is refused by whichever replica gets it, while
	// 127.0.0.3 still gets in.
	first := lb.hold(t, w.Alice, "127.0.0.2")
	defer first.Close()
	second := lb.hold(t, w.Alice, "127.0.0.2")
	defer second.Close()
	for i := range replicas {
		waitMetric(t, replicas[i], "collab_lease_ssh_connections", 1)
	}
	if c, err := lb.dial(w.Alice, "127.0.0.2"); err == nil {
		c.Close()
		t.Fatal("a third connection from 127.0.0.2 got in, one per address allowed")
	}
	other := lb.hold(t, w.Bob, "127.0.0.3")
	defer other.Close()
	refused := 0
	for _, s := range replicas {
		if strings.Contains(s.Logs(), `too many connections from one address" remote=127.0.0.2:`) {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no replica logged refusing 127.0.0.2's third connection by its own address")
	}

	// HTTP through the balancer: the winner's lease.
	resp, err := lb.get(ctx, "127.0.0.4", "/api/v1/repos/"+w.Widgets.FullName()+"/leases")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Leases []struct {
			Issue  int64  `json:"issue"`
			Holder string `json:"holder"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(resp, &list); err != nil || len(list.Leases) != 1 || list.Leases[0].Issue != n || list.Leases[0].Holder != racers[winner].Login {
		t.Fatalf("leases through the balancer: %s (%v); want %s's on #%d", resp, err, racers[winner].Login, n)
	}

	// Gitea down: no replica is ready, and HAProxy turns to the ones that
	// are alive, which answer rather than the balancer refusing.
	stopGitea(t, g)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(lb.logs.String(), "backend ssh_ready has no server available") ||
		!strings.Contains(lb.logs.String(), "backend http_ready has no server available") {
		if time.Now().After(deadline) {
			t.Fatalf("HAProxy never found the replicas unready with Gitea down:\n%s", tail(lb.logs.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(t, lb.ssh(ctx, w.Carol, "127.0.0.7", "collab-lease help"), 0, "help through the balancer, Gitea down")
	if _, err := lb.get(ctx, "127.0.0.7", "/healthz"); err != nil {
		t.Fatalf("HTTP through the balancer, Gitea down: %v", err)
	}
}

// racerAddr is the loopback address racer i connects from.
func racerAddr(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

// balancer is HAProxy running deploy/ha/haproxy.cfg in front of replicas.
type balancer struct {
	sshAddr, httpAddr string
	knownHosts        string
	hostKey           ssh.PublicKey
	logs              *leasetest.LogBuffer
}

// startHAProxy runs HAProxy in the foreground with the shipped
// configuration, its binds handed over as sockets already listening (so
// no port is picked and then raced for), the replicas' addresses through
// the environment; it is stopped when t ends.
func startHAProxy(t *testing.T, haproxy string, replicas []*Sidecar) *balancer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		files = append(files, f)
		_ = l.Close() // the file is a copy of the socket, which stays open
	}
	env := append(os.Environ(), "COLLAB_SSH_BIND=fd@3", "COLLAB_HTTP_BIND=fd@4")
	for i, s := range replicas {
		admin := strings.TrimPrefix(s.AdminURL, "http://")
		for name, addr := range map[string]string{"SSH": s.SSHAddr, "HTTP": s.HTTPAddr, "ADMIN": admin} {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Fatal(err)
			}
			env = append(env, fmt.Sprintf("REPLICA%d_HOST=%s", i+1, host), fmt.Sprintf("REPLICA%d_%s_PORT=%s", i+1, name, port))
		}
	}
	b := &balancer{sshAddr: addrs[0], httpAddr: addrs[1], logs: &leasetest.LogBuffer{}}
	cmd := exec.Command(haproxy, "-db", "-f", filepath.Join(root, "deploy", "ha", "haproxy.cfg"))
	cmd.Env, cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = env, files, b.logs, b.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("haproxy log:\n%s", tail(b.logs.String(), 40))
		}
	})

	pub, err := os.ReadFile(replicas[0].opts.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := hostPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if b.hostKey, _, _, _, err = ssh.ParseAuthorizedKey([]byte(key)); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(b.sshAddr)
	b.knownHosts = filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(b.knownHosts, []byte(fmt.Sprintf("[%s]:%s %s\n", host, port, key)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Until HAProxy answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := b.get(ctx, "127.0.0.6", "/healthz"); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", b.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not answer:\n%s", b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

// ssh runs the real OpenSSH client as u through the balancer, from the
// loopback address from.
func (b *balancer) ssh(ctx context.Context, u *User, from string, words ...string) SSHResult {
	host, port, _ := net.SplitHostPort(b.sshAddr)
	args := append([]string{"-F", os.DevNull, "-p", port, "-b", from, "-i", u.Key.Path,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + b.knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "git@" + host}, words...)
	r, err := RunCommand(exec.CommandContext(ctx, "ssh", args...))
	if err != nil {
		r.Code = -1
		r.Stderr += err.Error()
	}
	return r
}

// dial opens an authenticated SSH connection as u through the balancer,
// from the loopback address from.
func (b *balancer) dial(u *User, from string) (*ssh.Client, error) {
	signer, err := loadSigner(u.Key.Path)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", b.sshAddr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	cc, chans, reqs, err := ssh.NewClientConn(c, b.sshAddr, &ssh.ClientConfig{User: "git",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(b.hostKey)})
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// hold is dial, retried for a while (a connection the balancer still
// counts may steer one to the busier replica once).
func (b *balancer) hold(t *testing.T, u *User, from string) *ssh.Client {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := b.dial(u, from)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect as %s from %s through the balancer: %v", u.Login, from, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// get asks the balancer's HTTP port for path from the loopback address
// from; anything but 200 is an error.
func (b *balancer) get(ctx context.Context, from, path string) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.httpAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return body.Bytes(), fmt.Errorf("GET %s: %s %s", path, resp.Status, body.String())
	}
	return body.Bytes(), nil
}
