package ssh

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/collab-lease/collab-lease/plugin/forge"
	gossh "golang.org/x/crypto/ssh"
)

// Keys resolves the fingerprint of a verified key to the account that owns
// it (plugin/gitea's Forge does): exactly one active user key whose owner may log
// in, else an error wrapping forge.ErrNotFound; any other error means the
// forge could not tell.
type Keys interface {
	UserByKey(ctx context.Context, fingerprint string) (forge.User, error)
}

// Permission extensions carrying the identity of the verified key. They are
// set only by the public-key callback and read only from the
// authenticated connection's Permissions (connInfo).
const (
	extUserID      = "collab-lease-user-id" // decimal
	extLogin       = "collab-lease-login"
	extFingerprint = "collab-lease-fingerprint"
	extUnavailable = "collab-lease-forge-unavailable"
)

// offered answers a key the client only offers (the library calls this
// before any signature): every key may be tried, and nothing is asked of
// the forge yet, so holding a published public key (Gitea serves
// /<user>.keys) tells nobody whether it works here, nor makes the sidecar
// ask Gitea anything.
func (s *Server) offered(gossh.ConnMetadata, gossh.PublicKey) (*gossh.Permissions, error) {
	return &gossh.Permissions{}, nil
}

// authenticate resolves a key through Keys once the client has proved it
// holds it (the library's verified-key callback, after the signature
// checked out). What it returns is what the authenticated connection's
// Permissions carry.
func (s *Server) authenticate(meta gossh.ConnMetadata, key gossh.PublicKey, _ *gossh.Permissions, _ string) (*gossh.Permissions, error) {
	fp := gossh.FingerprintSHA256(key)
	// Half the handshake deadline: a slow or saturated forge must leave
	// time to finish the handshake and answer exit 75.
	ctx, cancel := context.WithTimeout(context.Background(), min(s.CommandTimeout, s.HandshakeTimeout/2))
	defer cancel()
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	case <-ctx.Done():
		// The forge is too slow to keep up: like an unreachable forge,
		// let the client in to be told to retry (exit 75), rather than
		// refuse a key that may well be valid.
		s.Logger.Warn("key lookups saturated; letting the connection in to answer exit 75",
			"fingerprint", fp, "remote", meta.RemoteAddr().String())
		return &gossh.Permissions{Extensions: map[string]string{extUnavailable: "1", extFingerprint: fp}}, nil
	}
	user, err := s.Keys.UserByKey(ctx, fp)
	switch {
	case err == nil:
		return &gossh.Permissions{Extensions: map[string]string{
			extUserID: strconv.FormatInt(user.ID, 10), extLogin: user.Login, extFingerprint: fp}}, nil
	case errors.Is(err, forge.ErrNotFound):
		return nil, fmt.Errorf("unknown key %s", fp)
	default:
		s.Logger.Warn("key lookup failed; letting the connection in to answer exit 75",
			"fingerprint", fp, "remote", meta.RemoteAddr().String(), "err", err)
		return &gossh.Permissions{Extensions: map[string]string{extUnavailable: "1", extFingerprint: fp}}, nil
	}
}

// connInfo reads the verified identity from an authenticated connection.
// Anything short of a complete identity counts as unavailable, so a
// command never runs as nobody.
func connInfo(sc *gossh.ServerConn) ConnInfo {
	info := ConnInfo{RemoteAddr: sc.RemoteAddr(), Unavailable: true}
	p := sc.Permissions
	if p == nil {
		return info
	}
	info.Fingerprint = p.Extensions[extFingerprint]
	if p.Extensions[extUnavailable] != "" {
		return info
	}
	id, err := strconv.ParseInt(p.Extensions[extUserID], 10, 64)
	login := p.Extensions[extLogin]
	if err != nil || login == "" {
		return info
	}
	info.UserID, info.Login, info.Unavailable = id, login, false
	return info
}
