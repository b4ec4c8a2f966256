package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// call makes one request to the sidecar's admin listener and returns its
// status and body (at most contract.MaxGateAnswer bytes), all within the
// gate's timeout: connecting, sending, and reading the whole answer.
//
// The client is its own: no proxy from the environment (Gitea's may name
// one for the internet; the admin listener is not behind it), no
// redirects (a redirect would carry the secret elsewhere), no keep-alive
// (the process ends after one request).
func call(g gate, method, path string, body []byte) (status int, reply []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, g.endpoint(path), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(contract.GateSecretHeader, g.secret)
	req.Header.Set("User-Agent", "collab-gate-hook")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{
		Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       (&net.Dialer{}).DialContext,
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, noAnswer(ctx, g, err)
	}
	defer resp.Body.Close()
	reply, err = io.ReadAll(io.LimitReader(resp.Body, contract.MaxGateAnswer+1))
	if err != nil {
		return resp.StatusCode, nil, noAnswer(ctx, g, err)
	}
	if len(reply) > contract.MaxGateAnswer {
		return resp.StatusCode, nil, fmt.Errorf("its answer is larger than %d MiB", contract.MaxGateAnswer>>20)
	}
	return resp.StatusCode, reply, nil
}

// noAnswer words a failed exchange, naming the timeout when it ran out.
func noAnswer(ctx context.Context, g gate, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v", g.timeout)
	}
	var uerr interface{ Unwrap() error }
	if errors.As(err, &uerr) {
		// *url.Error repeats the method and URL the caller names already.
		if inner := uerr.Unwrap(); inner != nil {
			err = inner
		}
	}
	return err
}
