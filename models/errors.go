package models

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors: categories a transport maps once onto its own codes.
var (
	// ErrHeld: a live lease is held by someone else (acquire). The error
	// is a *HeldError naming the holder.
	ErrHeld = errors.New("lease held by another")
	// ErrNotHolder: the caller does not hold a live lease (renew, release).
	// The error is a *NotHolderError naming the live holder, if any.
	ErrNotHolder = errors.New("not the lease holder")
	// ErrInvalid: the request itself is malformed (non-positive issue,
	// empty holder, a ttl that is not whole seconds or out of range).
	ErrInvalid = errors.New("invalid lease request")
	// ErrBusy: the database stayed locked past its timeout, or the
	// caller's deadline passed first. Nothing was written; retry.
	ErrBusy = errors.New("lease database busy")
	// ErrUnreachable: the database server (PostgreSQL) could not be
	// reached, or refused to work (shutting down, too many connections,
	// a standby that takes no writes). Nothing was written, or, if the
	// connection broke during COMMIT, the outcome is unknown; retry. It
	// is a kind of ErrBusy (errors.Is(err, ErrBusy) holds), so every
	// transport answers it as it answers busy: exit 75, HTTP 503.
	ErrUnreachable error = unreachableError{}
)

type unreachableError struct{}

func (unreachableError) Error() string { return "lease database unreachable" }

// Is makes errors.Is(ErrUnreachable, ErrBusy) true.
func (unreachableError) Is(target error) bool { return target == ErrBusy }

// HeldError says whom an acquire lost to and until when (nil: open-ended).
// Agent is which of the holder's agents holds it ("" the account itself).
type HeldError struct {
	Holder    string
	Agent     string
	ExpiresAt *time.Time
}

func (e *HeldError) Error() string {
	who := e.Holder
	if e.Agent != "" {
		who += " (agent " + e.Agent + ")"
	}
	if e.ExpiresAt == nil {
		return fmt.Sprintf("held by %s", who)
	}
	return fmt.Sprintf("held by %s until %s", who, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// ErrAlreadyHolder: a handoff names as its target the holder of the live
// lease itself (nothing to hand on).
var ErrAlreadyHolder = errors.New("the target already holds the lease")

// ErrLimit: a new tenure would take its holder, or its holder's account,
// past the ledger's claim cap (acquire, next). The error is a *LimitError.
var ErrLimit = errors.New("claim cap reached")

// LimitError says which cap a new tenure would have passed: Scope
// "holder" (the account and the agent) or "account" (all its agents),
// the cap, and how many live leases the scope holds.
type LimitError struct {
	Scope string
	Limit int64
	Live  int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s holds %d live claims, its cap of %d", e.Scope, e.Live, e.Limit)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// ErrCooling: the last lease lapsed less than the lock-delay ago,
// and the caller is not its holder (acquire). The error is a
// *CoolingError saying until when.
var ErrCooling = errors.New("lease cooling down after a lapse")

// CoolingError says until when an issue whose lease lapsed cools down:
// no holder but the lapsed one may claim it before Until.
type CoolingError struct {
	Until time.Time
}

func (e *CoolingError) Error() string {
	return "cooling down until " + e.Until.UTC().Format(time.RFC3339)
}

// Is makes errors.Is(err, ErrCooling) true.
func (e *CoolingError) Is(target error) bool { return target == ErrCooling }

// NotHolderError says who, if anyone, holds the live lease the caller tried
// to renew or release. Holder is "" when the issue is free.
type NotHolderError struct {
	Holder    string
	Agent     string
	ExpiresAt *time.Time
}

func (e *NotHolderError) Error() string {
	if e.Holder == "" {
		return "not the holder: the issue is not claimed"
	}
	return fmt.Sprintf("not the holder: held by %s", e.Holder)
}

// Is makes errors.Is(err, ErrNotHolder) true.
func (e *NotHolderError) Is(target error) bool { return target == ErrNotHolder }
