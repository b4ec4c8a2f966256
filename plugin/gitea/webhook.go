package gitea

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Gitea tells the sidecar of closed, merged and deleted issues and of
// deleted repositories through one system webhook (docs/operating.md,
// "When issues close: Gitea's webhook"), which install registers with the
// admin API. What this file relies on, checked in Gitea 1.26's source
// (routers/api/v1/admin/hooks.go, routers/api/v1/utils/hook.go) and
// against a running instance:
//
//   - POST /api/v1/admin/hooks makes a system hook only when config holds
//     "is_system_webhook": "true", a string; without it the hook is a
//     default (template) hook, copied into every new repository and never
//     fired for the others.
//   - Its answers never say which kind a hook is, nor its secret: a hook is
//     a system hook when GET /api/v1/admin/hooks?type=system lists it
//     (type=default lists the templates).
//   - PATCH /api/v1/admin/hooks/{id} sets the URL, content type, events,
//     active flag and name (and clears the branch filter and authorization
//     header unless given) but ignores config.secret; it replaces the
//     events by the list given ("push" when none is), and answers 500, not
//     404, for a hook that is gone.
//   - There is no API for a hook's deliveries; Gitea's web page
//     /-/admin/hooks/{id} shows them to a signed-in administrator.
//   - The admin routes need a site administrator's token with the
//     read:admin scope to read and write:admin to change.
//
// Since the secret cannot be read back or patched, the hook's name carries
// an identifier of it, "collab-lease secret:<hex>" (see secretID): install
// then knows whether Gitea signs with the secret in the data directory,
// and replaces a hook that does not (delete and create; the delivery
// history goes with it).
//
// Which hooks are the sidecar's: those named "collab-lease" (with or
// without the identifier), and any at the sidecar's delivery URL. One
// Gitea has one sidecar, so a named hook at another URL is the sidecar's
// from an earlier --webhook-url or public URL and is moved to the new one.

// WebhookName names the sidecar's system webhook in Gitea.
const WebhookName = "collab-lease"

// WebhookEvents are the events the sidecar asks Gitea for. Gitea subscribes
// their sub-events too (issue_label, pull_request_sync, …).
var WebhookEvents = []string{"issues", "pull_request", "repository"}

const webhookScopeFix = "managing the system webhook needs a Gitea site administrator's token with the " +
	"write:admin scope (read:admin to check it); pass such a token with --gitea-token-file"

// asHookAdmin is the Forge's token on the admin hooks API: a refusal
// means it lacks the admin scope or is not a site administrator's.
func (f *Forge) asHookAdmin() identity { return identity{token: f.token, fix: webhookScopeFix} }

// hook is a webhook as Gitea's API shows it (the SDK's type lacks the
// name).
type hook struct {
	ID     int64             `json:"id"`
	Name   string            `json:"name"`
	Type   string            `json:"type"`
	Config map[string]string `json:"config"`
	Events []string          `json:"events"`
	Active bool              `json:"active"`
}

// secretID identifies a secret without revealing it: the first 8 bytes of
// an HMAC of a fixed text keyed with the secret, in hex.
func secretID(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("collab-lease webhook secret"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

func webhookName(secret string) string { return WebhookName + " secret:" + secretID(secret) }

// ours says whether h is the sidecar's hook (see above).
func (h hook) ours(deliveryURL string) bool {
	return h.Name == WebhookName || strings.HasPrefix(h.Name, WebhookName+" ") || h.Config["url"] == deliveryURL
}

// fits says whether h delivers what the sidecar needs, where it listens:
// everything but the secret.
func (h hook) fits(deliveryURL string) bool {
	return h.Type == "gitea" && h.Config["url"] == deliveryURL && h.Config["content_type"] == "json" && h.Active && eventsFit(h.Events)
}

// eventsFit: every event the sidecar needs, and nothing but their
// families (a hook also sending pushes would only make work).
func eventsFit(events []string) bool {
	for _, want := range WebhookEvents {
		if !slices.Contains(events, want) {
			return false
		}
	}
	for _, e := range events {
		if e != "repository" && !strings.HasPrefix(e, "issue") && !strings.HasPrefix(e, "pull_request") {
			return false
		}
	}
	return true
}

// maxHookPages bounds the listing, against a server that never ends it.
const maxHookPages = 100

// hooks lists Gitea's admin hooks of one kind ("system" or "default"),
// page by page until an empty one (Gitea may cap the page size below what
// is asked for, so a short page does not mean the last).
func (f *Forge) hooks(ctx context.Context, id identity, kind string) ([]hook, error) {
	var all []hook
	for page := 1; page <= maxHookPages; page++ {
		var got []hook
		q := url.Values{"type": {kind}, "page": {fmt.Sprint(page)}, "limit": {"50"}}
		if err := f.send(ctx, id, http.MethodGet, "/api/v1/admin/hooks", q, nil, &got); err != nil {
			return nil, err
		}
		if len(got) == 0 {
			slices.SortFunc(all, func(a, b hook) int { return cmp.Compare(a.ID, b.ID) })
			return all, nil
		}
		all = append(all, got...)
	}
	return nil, fmt.Errorf("GET /api/v1/admin/hooks?type=%s: %w: more than %d pages", kind, forge.ErrUnavailable, maxHookPages)
}

// sidecarHooks splits the sidecar's hooks among hs into the one to keep
// (the first at deliveryURL, else the first) and the rest.
func sidecarHooks(hs []hook, deliveryURL string) (keep *hook, rest []hook) {
	var mine []hook
	for _, h := range hs {
		if h.ours(deliveryURL) {
			mine = append(mine, h)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	i := slices.IndexFunc(mine, func(h hook) bool { return h.Config["url"] == deliveryURL })
	if i < 0 {
		i = 0
	}
	keep = &mine[i]
	return keep, slices.Delete(slices.Clone(mine), i, i+1)
}

// deleteHook removes one admin hook; one already gone is no error.
func (f *Forge) deleteHook(ctx context.Context, id identity, hookID int64) error {
	err := f.send(ctx, id, http.MethodDelete, fmt.Sprintf("/api/v1/admin/hooks/%d", hookID), nil, nil, nil)
	if errors.Is(err, forge.ErrNotFound) {
		return nil
	}
	return err
}

// RegisterWebhook makes sure Gitea has exactly one system webhook of the
// sidecar: type gitea, JSON, active, WebhookEvents, delivering to
// deliveryURL (the webhook base URL + routes.WebhookPath) signed with
// secret. It reuses the sidecar's hook when it fits; updates it (PATCH)
// when only its URL, events, content type or active flag differ; replaces
// it when its secret (or type) differs; creates one when there is none; and
// deletes the sidecar's other hooks, system or default. The token needs
// the write:admin scope. It returns the hook's ID.
func (f *Forge) RegisterWebhook(ctx context.Context, deliveryURL, secret string) (int64, Registration, error) {
	if secret == "" {
		return 0, "", errors.New("register the webhook: no secret")
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asHookAdmin()
	system, err := f.hooks(ctx, id, "system")
	if err != nil {
		return 0, "", fmt.Errorf("register the webhook: %w", err)
	}
	templates, err := f.hooks(ctx, id, "default")
	if err != nil {
		return 0, "", fmt.Errorf("register the webhook: %w", err)
	}
	keep, stale := sidecarHooks(system, deliveryURL)
	for _, h := range templates {
		if h.ours(deliveryURL) {
			stale = append(stale, h)
		}
	}

	name := webhookName(secret)
	var hookID int64
	var how Registration
	switch {
	case keep == nil || keep.Type != "gitea" || keep.Name != name:
		// Create before deleting: at worst Gitea delivers twice for a
		// moment, never not at all.
		var made hook
		err := f.send(ctx, id, http.MethodPost, "/api/v1/admin/hooks", nil, map[string]any{
			"type":   "gitea",
			"name":   name,
			"active": true,
			"events": WebhookEvents,
			"config": map[string]string{
				"url":               deliveryURL,
				"content_type":      "json",
				"secret":            secret,
				"is_system_webhook": "true", // a string, inside config (see above)
			},
		}, &made)
		if err != nil {
			return 0, "", fmt.Errorf("register the webhook: %w", err)
		}
		if made.ID <= 0 {
			return 0, "", fmt.Errorf("register the webhook: %w: Gitea returned no hook ID", forge.ErrUnavailable)
		}
		hookID, how = made.ID, Registered
		if keep != nil {
			stale, how = append(stale, *keep), Replaced
		}
	case !keep.fits(deliveryURL):
		var got hook
		err := f.send(ctx, id, http.MethodPatch, fmt.Sprintf("/api/v1/admin/hooks/%d", keep.ID), nil, map[string]any{
			"active":               true,
			"events":               WebhookEvents, // all of them: PATCH replaces the list
			"config":               map[string]string{"url": deliveryURL, "content_type": "json"},
			"branch_filter":        "",
			"authorization_header": "",
		}, &got)
		if err != nil {
			return 0, "", fmt.Errorf("update webhook %d: %w", keep.ID, err)
		}
		hookID, how = keep.ID, Updated
	default:
		hookID, how = keep.ID, Reused
	}
	for _, h := range stale {
		if err := f.deleteHook(ctx, id, h.ID); err != nil {
			return 0, "", fmt.Errorf("delete the sidecar's webhook %d (%s): %w", h.ID, h.Config["url"], err)
		}
		if how == Reused {
			how = Updated
		}
	}
	return hookID, how, nil
}

// RemoveWebhook deletes the sidecar's hooks (system or default; see
// above) from Gitea and says how many there were; none is no error.
func (f *Forge) RemoveWebhook(ctx context.Context, deliveryURL string) (int, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asHookAdmin()
	n := 0
	for _, kind := range []string{"system", "default"} {
		hs, err := f.hooks(ctx, id, kind)
		if err != nil {
			return n, fmt.Errorf("remove the webhook: %w", err)
		}
		for _, h := range hs {
			if !h.ours(deliveryURL) {
				continue
			}
			if err := f.deleteHook(ctx, id, h.ID); err != nil {
				return n, fmt.Errorf("remove webhook %d: %w", h.ID, err)
			}
			n++
		}
	}
	return n, nil
}

// CheckWebhook checks that Gitea has one system webhook of the sidecar, as
// RegisterWebhook leaves it: type gitea, JSON, active, with
// WebhookEvents, delivering to deliveryURL, signed with secret. It returns
// the hook's ID; forge.ErrNotFound says what is missing or differs
// (RegisterWebhook mends it). Gitea's API shows no deliveries, so whether
// the last one succeeded is not checked here. The token needs read:admin.
func (f *Forge) CheckWebhook(ctx context.Context, deliveryURL, secret string) (int64, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	system, err := f.hooks(ctx, f.asHookAdmin(), "system")
	if err != nil {
		return 0, err
	}
	h, rest := sidecarHooks(system, deliveryURL)
	switch {
	case h == nil:
		return 0, fmt.Errorf("no system webhook delivers to %s: %w", deliveryURL, forge.ErrNotFound)
	case len(rest) > 0:
		ids := []int64{h.ID}
		for _, r := range rest {
			ids = append(ids, r.ID)
		}
		return h.ID, fmt.Errorf("system webhooks %v are all the sidecar's, so it gets each event more than once: %w", ids, forge.ErrNotFound)
	case h.Config["url"] != deliveryURL:
		return h.ID, fmt.Errorf("system webhook %d delivers to %s, not %s: %w", h.ID, h.Config["url"], deliveryURL, forge.ErrNotFound)
	case h.Type != "gitea" || h.Config["content_type"] != "json":
		return h.ID, fmt.Errorf("system webhook %d is of type %s with %s content, not gitea with JSON: %w", h.ID, h.Type, h.Config["content_type"], forge.ErrNotFound)
	case !h.Active:
		return h.ID, fmt.Errorf("system webhook %d is not active: %w", h.ID, forge.ErrNotFound)
	case !eventsFit(h.Events):
		return h.ID, fmt.Errorf("system webhook %d sends %s, not just %s: %w", h.ID, strings.Join(h.Events, ","), strings.Join(WebhookEvents, ","), forge.ErrNotFound)
	case h.Name != webhookName(secret):
		return h.ID, fmt.Errorf("system webhook %d was not registered with this data directory's secret (its name is %q): %w", h.ID, h.Name, forge.ErrNotFound)
	}
	return h.ID, nil
}
