package main

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// --db takes a PostgreSQL URL as it is; one that cannot name a database is
// refused in one line that shows no password.
func TestConfigDB(t *testing.T) {
	env := envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"})
	base := []string{"--gitea-url", "http://g:3000"}
	for _, db := range []string{
		"postgres://collab@db.example.com/collab",
		"postgresql://collab:pw-s3cret@db.example.com:5433/collab?sslmode=verify-full&connect_timeout=5",
		"/var/lib/collab/collab.db",
	} {
		cfg, err := loadConfig("serve", append(base, "--db", db), env, io.Discard)
		if err != nil || cfg.DB != db {
			t.Errorf("--db %s: %q, %v", db, cfg.DB, err)
		}
	}
	for _, c := range []struct{ db, want string }{
		{"postgres://collab:pw-s3cret@db.example.com:port/collab", "not a URL"},
		{"postgres://collab:pw-s3cret@db.example.com", "no database name"},
		{"postgres://collab:pw-s3cret@db.example.com/collab?sslmode=maybe", "sslmode"},
		{"postgres://collab:pw-s3cret\n@db.example.com/collab", "not a URL"},
	} {
		_, err := loadConfig("serve", append(base, "--db", c.db), env, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), "db ") || !strings.Contains(err.Error(), c.want) ||
			strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--db %q: %v, want one line about %q without the password", c.db, err, c.want)
		}
	}
}

// serve runs on a PostgreSQL ledger, and neither its log nor doctor shows
// the URL's password.
func TestServeOnPostgres(t *testing.T) {
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "pw-s3cret") // the test server trusts; the password goes unused
	db := u.String()
	logs, addrs := startServe(t, "--db", db)
	if code, body := httpGet(t, "http://"+addrs["admin"]+"/readyz"); code != 503 || !strings.Contains(body, `"database":"ok"`) {
		t.Errorf("admin /readyz: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+addrs["admin"]+"/metrics"); code != 200 || !strings.Contains(body, "\ncollab_lease_live_leases 0\n") {
		t.Errorf("admin /metrics: %d %.300s", code, body)
	}
	if l := logs.String(); strings.Contains(l, "s3cret") || !strings.Contains(l, strings.Replace(db, "pw-s3cret", "xxxxx", 1)) {
		t.Errorf("the log shows the password, or not the ledger:\n%s", l)
	}

	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig("doctor", []string{"--gitea-url", "http://127.0.0.1:1", "--data-dir", dataDir, "--db", db},
		envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	found, err := checkDataDir(context.Background(), cfg)
	if err != nil || !strings.Contains(found, "0 live leases") || strings.Contains(found, "s3cret") {
		t.Fatalf("doctor on PostgreSQL: %q %v", found, err)
	}
	u.Host = "127.0.0.1:1" // nothing listens there
	cfg.DB = u.String()
	if _, err := checkDataDir(context.Background(), cfg); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("doctor on an unreachable PostgreSQL: %v", err)
	}
}

// serve logs and counts a lost connection of its LISTEN for the other
// replicas' changes.
func TestServeLogsALostListen(t *testing.T) {
	db := pgtest.NewDatabase(t)
	logs, addrs := startServe(t, "--db", db)
	leasetest.WaitFor(t, "the LISTEN cut", func() bool { return pgtest.CutListeners(t, db) == 1 })
	leasetest.WaitFor(t, "the loss logged", func() bool {
		return strings.Contains(logs.String(), "lost the PostgreSQL connection that hears the other replicas' changes")
	})
	if code, body := httpGet(t, "http://"+addrs["admin"]+"/metrics"); code != 200 || !strings.Contains(body, "\ncollab_lease_listen_connections_lost_total 1\n") {
		t.Errorf("admin /metrics: %d %.300s", code, body)
	}
}

// serve with its PostgreSQL server unreachable does not start: it says why
// in one line (no password) and exits 75, "try again", so that a service
// manager tells a database not up yet from a mistake in the configuration.
func TestServeWithoutItsDatabaseExitsTempFail(t *testing.T) {
	db := "postgres://collab:pw-s3cret@127.0.0.1:1/collab?connect_timeout=2" // nothing listens there
	var stdout, stderr strings.Builder
	env := envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"})
	code := run([]string{"serve", "--gitea-url", "http://127.0.0.1:1", "--data-dir", t.TempDir(), "--db", db}, env, &stdout, &stderr)
	msg := stderr.String()
	if code != 75 || strings.Contains(msg, "s3cret") || !strings.Contains(msg, "collab-sidecar serve: open ledger postgres://collab:xxxxx@127.0.0.1:1/collab") {
		t.Fatalf("serve without its database: exit %d, stderr %q", code, msg)
	}
}
