//go:build race

package integration

// raceEnabled: these tests run under the race detector, and so does the
// sidecar they start (see fixtureInit).
const raceEnabled = true
