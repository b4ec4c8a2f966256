package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// decodeReply reads the sidecar's reply to req, sent with exit status code
// (0 or 4), into the contract shape that verb answers with under that
// status: *contract.Tenure, *contract.Conflict, *contract.Cooling,
// *contract.Limit, *contract.None, *contract.Stale, *contract.Released,
// *contract.HandedOff, *contract.List, *contract.History,
// *contract.Merged, *contract.MergeRefused, *contract.MergeBusy,
// *contract.Reservations or *contract.ReserveConflict. What
// it cannot read, and a shape or status the verb never answers with, is
// an error: the callers then show the reply as it is rather than guess.
//
// It is the one reading of a reply: the command line renders what it
// returns for people, and the MCP server hands it to agents.
func decodeReply(req contract.Command, code int, body []byte) (any, error) {
	switch {
	case code != contract.ExitOK && code != contract.ExitConflict:
		return nil, fmt.Errorf("unexpected exit status %d", code)
	case req.Verb == contract.VerbList || req.Verb == contract.VerbHistory:
		if code != contract.ExitOK {
			return nil, fmt.Errorf("%s answered with exit status %d", req.Verb, code)
		}
		if req.Verb == contract.VerbList {
			return decodeAs[contract.List](body)
		}
		return decodeAs[contract.History](body)
	case code == contract.ExitOK && reserving(req.Verb):
		want := map[contract.Verb]string{contract.VerbReserve: contract.StatusReserved, contract.VerbUnreserve: contract.StatusUnreserved,
			contract.VerbReservations: contract.StatusReservations}[req.Verb]
		r, err := decodeAs[contract.Reservations](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, want)
	case req.Verb == contract.VerbReserve && bytes.Contains(body, []byte(`"status":"conflict"`)):
		r, err := decodeAs[contract.ReserveConflict](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusConflict)
	case code == contract.ExitOK && req.Verb == contract.VerbHandoff:
		r, err := decodeAs[contract.HandedOff](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusHandedOff)
	case code == contract.ExitOK && req.Verb == contract.VerbMerge:
		r, err := decodeAs[contract.Merged](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusMerged)
	case req.Verb == contract.VerbMerge && bytes.Contains(body, []byte(`"status":"refused"`)):
		r, err := decodeAs[contract.MergeRefused](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusRefused)
	case req.Verb == contract.VerbMerge && bytes.Contains(body, []byte(`"status":"busy"`)):
		r, err := decodeAs[contract.MergeBusy](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusBusy)
	case code == contract.ExitOK && req.Verb == contract.VerbRelease:
		r, err := decodeAs[contract.Released](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusReleased)
	case code == contract.ExitOK:
		want := map[contract.Verb]string{contract.VerbAcquire: contract.StatusAcquired, contract.VerbNext: contract.StatusAcquired,
			contract.VerbRenew: contract.StatusRenewed, contract.VerbCheck: contract.StatusCurrent}[req.Verb]
		r, err := decodeAs[contract.Tenure](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, want)
	case (req.Verb == contract.VerbAcquire || req.Verb == contract.VerbNext || req.Verb == contract.VerbHandoff || req.Verb == contract.VerbReserve) &&
		bytes.Contains(body, []byte(`"status":"limit"`)):
		r, err := decodeAs[contract.Limit](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusLimit)
	case req.Verb == contract.VerbNext:
		r, err := decodeAs[contract.None](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusNone)
	case req.Verb == contract.VerbCheck || (req.Verb == contract.VerbMerge && bytes.Contains(body, []byte(`"status":"stale"`))):
		r, err := decodeAs[contract.Stale](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusStale)
	case req.Verb == contract.VerbAcquire && bytes.Contains(body, []byte(`"status":"cooling"`)):
		r, err := decodeAs[contract.Cooling](body)
		if err != nil {
			return nil, err
		}
		return r, wantStatus(r.Status, code, contract.StatusCooling)
	}
	r, err := decodeAs[contract.Conflict](body)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Status == contract.StatusHeld && req.Verb == contract.VerbAcquire && r.Holder != nil:
		return r, nil
	case r.Status == contract.StatusNotHolder && (req.Verb == contract.VerbRenew || req.Verb == contract.VerbRelease || req.Verb == contract.VerbHandoff ||
		req.Verb == contract.VerbMerge || req.Verb == contract.VerbReserve):
		return r, nil
	}
	return nil, unexpected(r.Status, code)
}

// reserving reports whether v is a verb of path reservations.
func reserving(v contract.Verb) bool {
	return v == contract.VerbReserve || v == contract.VerbUnreserve || v == contract.VerbReservations
}

// decodeAs reads exactly one JSON object from body as a T.
func decodeAs[T any](body []byte) (*T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not the JSON reply expected: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return &v, nil
}

// wantStatus holds a reply's "status" to want: one shape serves several
// answers.
func wantStatus(status string, code int, want string) error {
	if want == "" || status != want {
		return unexpected(status, code)
	}
	return nil
}

func unexpected(status string, code int) error {
	return fmt.Errorf("unexpected status %s with exit status %d", quote(status), code)
}
