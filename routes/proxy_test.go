package routes

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/proxyheader"
)

// Behind a balancer that sends PROXY headers (version 1 or 2), the
// address each request is charged to is the client's the header names,
// not the balancer's: one client through the balancer runs out of its
// budget while another, through the same balancer, is served. A
// balancer's connection without a header, and a header from anywhere
// else, get no answer at all; a direct request is served as before.
func TestProxyHeaderAddressIsChargedTheForgeBudget(t *testing.T) {
	for _, version := range []byte{1, 2} {
		t.Run(map[byte]string{1: "v1", 2: "v2"}[version], func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.ForgeBudgets = forge.NewAddrBudgets(1, 3, nil) })
			f.forge.SetHook(func(ctx context.Context, method string) error {
				if b := forge.BudgetFrom(ctx); b != nil && !b.Allow() {
					return forge.ErrRateLimited
				}
				return nil
			})
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := &proxyheader.Listener{Listener: raw, From: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
				Logger: slog.New(slog.DiscardHandler)}
			srv := &http.Server{Handler: f.h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })

			// get asks for a list of leases from the loopback address from,
			// with a header naming client unless client is "".
			get := func(from, client string) (int, error) {
				c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
					DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
						d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
						conn, err := d.DialContext(ctx, network, addr)
						if err != nil || client == "" {
							return conn, err
						}
						h := proxyproto.HeaderProxyFromAddrs(version, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(client)), conn.RemoteAddr())
						if _, err := h.WriteTo(conn); err != nil {
							conn.Close()
							return nil, err
						}
						return conn, nil
					}}}
				resp, err := c.Get("http://" + raw.Addr().String() + "/api/v1/repos/acme/widgets/leases")
				if err != nil {
					return 0, err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode, nil
			}

			limited := 0
			for i := 0; i < 20; i++ {
				code, err := get("127.0.0.2", "198.51.100.9:40000")
				if err != nil {
					t.Fatal(err)
				}
				switch code {
				case http.StatusOK:
				case http.StatusTooManyRequests:
					limited++
				default:
					t.Fatalf("request %d: %d", i, code)
				}
			}
			if limited == 0 {
				t.Fatal("20 uncached requests of one client through the balancer were never limited")
			}
			if code, err := get("127.0.0.2", "198.51.100.10:40000"); err != nil || code != http.StatusOK {
				t.Fatalf("another client through the same balancer while the first is limited: %d, %v", code, err)
			}
			if code, err := get("127.0.0.2", ""); err == nil {
				t.Fatalf("the balancer without a header was answered %d", code)
			}
			if code, err := get("127.0.0.1", "198.51.100.11:40000"); err == nil {
				t.Fatalf("a header from an address not trusted was answered %d", code)
			}
			if code, err := get("127.0.0.1", ""); err != nil || code != http.StatusOK {
				t.Fatalf("a direct request: %d, %v", code, err)
			}
		})
	}
}
