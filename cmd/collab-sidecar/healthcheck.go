package main

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/collab-lease/collab-lease/plugin/proxyheader"
)

// healthcheck asks the local server's /healthz, on the configured HTTP
// address (a wildcard host means loopback). It is what the container
// image's HEALTHCHECK runs, so the image needs no HTTP client of its own.
func healthcheck(ctx context.Context, cfg Config) error {
	host, port, err := net.SplitHostPort(cfg.HTTPListen)
	if err != nil {
		return err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The server requires a PROXY header from this very address
			// (--proxy-protocol-from covers loopback): say the connection
			// is a local one, not a client's.
			if (&proxyheader.Listener{From: cfg.ProxyProtocolFrom}).Trusts(c.LocalAddr()) {
				if err := proxyheader.SendLocal(c); err != nil {
					c.Close()
					return nil, err
				}
			}
			return c, nil
		}}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("not healthy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not healthy: /healthz answered %s", resp.Status)
	}
	return nil
}

// probeEnv fills in placeholders for the settings healthcheck does not use
// but the configuration requires.
func probeEnv(getenv func(string) string) func(string) string {
	return func(k string) string {
		v := getenv(k)
		switch {
		case v != "":
			return v
		case k == "COLLAB_GITEA_URL":
			return "http://unused.invalid"
		case k == tokenEnv && getenv("COLLAB_GITEA_TOKEN_FILE") == "":
			return "unused"
		}
		return ""
	}
}
