//go:build !race

package integration

// raceEnabled: these tests (or benchmarks) run without the race detector,
// and so does the sidecar they start (see fixtureInit).
const raceEnabled = false
