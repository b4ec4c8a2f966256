// Package pgtest gives a test a PostgreSQL database of its own, on the
// server that COLLAB_TEST_POSTGRES names, and drops it when the test ends.
//
// It is for tests only (the ledger's, and the end-to-end ones that run a
// sidecar on PostgreSQL): it creates and drops databases and cuts their
// LISTEN connections (CutListeners), and never reads or writes a ledger
// (plugin/gates holds it to that).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names the variable that holds the URL of a PostgreSQL server where
// the tests may create databases, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const Env = "COLLAB_TEST_POSTGRES"

// NewDatabase creates an empty database and returns its URL (the server's,
// with the new database's name); the database is dropped, with whatever
// connections remain to it, when t ends. Without COLLAB_TEST_POSTGRES, t
// is skipped; with it, a server that does not answer fails t.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := os.Getenv(Env)
	if server == "" {
		t.Skip(Env + " is not set: skipping the PostgreSQL case (.ci/run sets it; see CONTRIBUTING.md)")
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL of a server where tests may create databases", Env)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("collab_test_%s_%s", time.Now().UTC().Format("20060102"), hex.EncodeToString(b[:]))
	if err := admin(server, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("%s: create a database: %v", Env, err)
	}
	t.Cleanup(func() {
		if err := admin(server, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("%s: drop database %s: %v", Env, name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// CutListeners ends, from the server's side, every connection to the
// database at dbURL (one of NewDatabase's) that waits in a LISTEN, as a
// network failure would, and returns how many it ended.
func CutListeners(t testing.TB, dbURL string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// admin runs one statement on the server's own database.
func admin(server, statement string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, statement)
	return err
}
