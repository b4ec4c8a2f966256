package plugin

import (
	"context"
	"errors"
	"fmt"
)

// Who is asking. An SSH connection is authenticated once, at its
// handshake, but may stay open for hours (OpenSSH's ControlMaster), so
// every command asks again, through the forge's key cache, whether the
// key still belongs to the same account and whether that account may
// still log in. A key deleted in Gitea, or an account deactivated or
// prohibited from logging in, is refused within the key cache's lifetime.

// Recheck re-resolves the key with this fingerprint of a connection that
// was authenticated as was. It returns the viewer as the account is now
// (a renamed account keeps its ID and gets its new login), ErrRevoked if
// the key no longer maps to that active account, or the forge's error
// (ErrUnavailable: retry).
func (s *Service) Recheck(ctx context.Context, fingerprint string, was User) (Viewer, error) {
	u, err := s.forge.UserByKey(ctx, fingerprint)
	switch {
	case errors.Is(err, ErrNotFound):
		return Viewer{}, fmt.Errorf("key %s of %s: %w", fingerprint, was.Login, ErrRevoked)
	case err != nil:
		return Viewer{}, err
	case u.ID != was.ID:
		return Viewer{}, fmt.Errorf("key %s moved from %s (%d) to %s (%d): %w", fingerprint, was.Login, was.ID, u.Login, u.ID, ErrRevoked)
	}
	return Viewer{User: u}, nil
}

// ByToken returns the viewer an API token belongs to. The viewer carries
// the token, so it sees only what the token's scopes allow. A token that
// is not valid is the forge's ErrNotFound.
func (s *Service) ByToken(ctx context.Context, token string) (Viewer, error) {
	u, err := s.forge.UserByToken(ctx, token)
	if err != nil {
		return Viewer{}, err
	}
	return Viewer{User: u, Token: token}, nil
}
