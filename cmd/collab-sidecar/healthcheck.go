package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
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
	resp, err := http.DefaultClient.Do(req)
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
