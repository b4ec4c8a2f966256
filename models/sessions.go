package models

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// Session epochs: how the ledger remembers sign-outs. A browser session
// is a signed cookie the sidecar cannot take back, so each account has an
// epoch, a number that only grows: a session carries the epoch its
// account had when it was issued, and is valid only while the account
// still has that epoch. Signing out moves the epoch on, which ends every
// session the account had, in every browser, on every sidecar that shares
// this ledger, and across restarts.
//
// One row per account that ever signed out, never more: the table is
// bounded by the forge's accounts, not by how often anyone signs in or
// out.

// sessionEpochRow is one account's session epoch; an account without a
// row is at epoch 0.
type sessionEpochRow struct {
	UserID int64 `gorm:"primaryKey;autoIncrement:false"`
	Epoch  int64 `gorm:"not null"`
}

func (sessionEpochRow) TableName() string { return "session_epochs" }

// SessionEpoch returns the session epoch of the forge account userID: 0
// until its first EndSessions.
func (s *Store) SessionEpoch(ctx context.Context, userID int64) (int64, error) {
	var epochs []int64
	err := s.db.WithContext(ctx).Model(&sessionEpochRow{}).Where("user_id = ?", userID).Limit(1).Pluck("epoch", &epochs).Error
	if err != nil {
		return 0, fmt.Errorf("session epoch of account %d: %w", userID, mapDBError(err))
	}
	if len(epochs) == 0 {
		return 0, nil
	}
	return epochs[0], nil
}

// EndSessions ends every session of the forge account userID issued so
// far: it moves the account's epoch on by one and returns the new epoch.
func (s *Store) EndSessions(ctx context.Context, userID int64) (int64, error) {
	if userID <= 0 {
		return 0, fmt.Errorf("end sessions of account %d: %w", userID, ErrInvalid)
	}
	var epoch int64
	err := s.write(ctx, accountScope(userID), func(tx *gorm.DB, _ int64) error {
		var rows []sessionEpochRow
		if err := tx.Where("user_id = ?", userID).Limit(1).Find(&rows).Error; err != nil {
			return err
		}
		epoch = 1
		if len(rows) == 1 {
			epoch = rows[0].Epoch + 1
		}
		return tx.Save(&sessionEpochRow{UserID: userID, Epoch: epoch}).Error
	})
	if err != nil {
		return 0, fmt.Errorf("end sessions of account %d: %w", userID, err)
	}
	return epoch, nil
}
