package leasemodel

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Check runs porcupine on history against m and returns its verdict. On a
// violation, if visualize, it writes porcupine's visualization of it to a
// temporary file and logs the file's name.
func Check(t testing.TB, m porcupine.Model, history []porcupine.Operation, timeout time.Duration, visualize bool) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(m, history, timeout)
	t.Logf("checked %d recorded operations in %s: %s", len(history), time.Since(start).Round(time.Millisecond), res)
	if res == porcupine.Illegal && visualize {
		f, err := os.CreateTemp("", "linearizability-*.html")
		if err == nil {
			if err := porcupine.Visualize(m, info, f); err == nil {
				t.Logf("visualization of the violation: %s", f.Name())
			}
			_ = f.Close()
		}
	}
	return res
}

// Scale is COLLAB_STRESS_SCALE, the factor by which the stress suites
// (linearizability, crash, outage, abuse) grow; 1, the size CI runs, when
// it is unset.
func Scale(t testing.TB) int {
	t.Helper()
	v := os.Getenv("COLLAB_STRESS_SCALE")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("COLLAB_STRESS_SCALE=%q: want a positive integer", v)
	}
	return n
}
