package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/proxyheader"
)

// When the sidecar requires PROXY headers from loopback (a balancer on the
// same host, or --proxy-protocol-from 0.0.0.0/0), the container's
// healthcheck sends a LOCAL one and is answered; it is refused without.
func TestHealthcheckThroughProxyProtocolFromLoopback(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	from := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	go func() {
		_ = srv.Serve(&proxyheader.Listener{Listener: raw, From: from, Logger: slog.New(slog.DiscardHandler)})
	}()
	t.Cleanup(func() { _ = srv.Close() })
	cfg := Config{HTTPListen: raw.Addr().String(), ProxyProtocolFrom: from}
	if err := healthcheck(context.Background(), cfg); err != nil {
		t.Fatalf("healthcheck with a LOCAL header: %v", err)
	}
	cfg.ProxyProtocolFrom = nil
	if err := healthcheck(context.Background(), cfg); err == nil {
		t.Fatal("a healthcheck without a header was answered by a listener that requires one")
	}
}
