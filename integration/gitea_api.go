package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// APIError is a non-2xx answer of Gitea's REST API.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s /api/v1%s: HTTP %d: %s", e.Method, e.Path, e.Status, strings.TrimSpace(e.Body))
}

// API is a minimal client of Gitea's REST API for setting up tests.
type API struct {
	URL      string // Gitea's base URL
	Token    string // sent as "Authorization: token …" unless empty
	Sudo     string // sent as the Sudo header unless empty
	User     string // with Password: basic authentication instead of Token
	Password string
	HTTP     *http.Client
}

// Admin is the API as the site administrator.
func (g *Gitea) Admin() *API { return &API{URL: g.URL, Token: g.AdminToken} }

// As is the API as login, through the administrator's token and Sudo.
func (g *Gitea) As(login string) *API { return &API{URL: g.URL, Token: g.AdminToken, Sudo: login} }

// Do sends method /api/v1<path> with in as the JSON body (if not nil) and
// decodes a JSON answer into out (if not nil). A non-2xx answer is an
// *APIError.
func (a *API) Do(ctx context.Context, method, path string, in, out any) error {
	_, err := a.DoHeader(ctx, method, path, in, out)
	return err
}

// DoHeader is Do that also returns the answer's header (X-Total-Count,
// Link), nil when no answer came.
func (a *API) DoHeader(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.URL, "/")+"/api/v1"+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case a.User != "":
		req.SetBasicAuth(a.User, a.Password)
	case a.Token != "":
		req.Header.Set("Authorization", "token "+a.Token)
	}
	if a.Sudo != "" {
		req.Header.Set("Sudo", a.Sudo)
	}
	hc := a.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s /api/v1%s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, fmt.Errorf("%s /api/v1%s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, fmt.Errorf("%s /api/v1%s: decode: %w", method, path, err)
		}
	}
	return resp.Header, nil
}
