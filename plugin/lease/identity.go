package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/collab-lease/collab-lease/plugin/forge"
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
func (s *Service) Recheck(ctx context.Context, fingerprint string, was forge.User) (Viewer, error) {
	u, err := s.forge.UserByKey(ctx, fingerprint)
	switch {
	case errors.Is(err, forge.ErrNotFound):
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

// Browser sessions. A session is a signed cookie that the HTTP transport
// issues at sign-in and checks on every request; a cookie cannot be taken
// back, so signing out has to be remembered on the server. The ledger
// keeps one number per account, its session epoch (models/sessions.go): a
// session is issued with the account's epoch and is valid only while the
// account still has it; signing out moves the epoch on.
//
// Why an epoch per account rather than a list of revoked sessions: it is
// one row per account however often anyone signs in and out (a list
// grows with every sign-out until its sessions expire), and the ledger
// keeps it across restarts and for every sidecar on the same ledger (a
// list in memory would forget a sign-out at the next restart, and a
// copied cookie would work again). The price: signing out ends the
// account's sessions in all its browsers, not only the one that asked.

// SessionEpoch returns u's session epoch: the one a session issued now
// carries, and the one a session of u must carry to be valid.
func (s *Service) SessionEpoch(ctx context.Context, u forge.User) (int64, error) {
	return s.ledger.SessionEpoch(ctx, u.ID)
}

// EndSessions ends every session of u issued so far.
func (s *Service) EndSessions(ctx context.Context, u forge.User) error {
	_, err := s.ledger.EndSessions(ctx, u.ID)
	return err
}
