#!/usr/bin/env bash
# Runs the benchmarks of issue 8 and writes bench/RESULTS.md: the ledger's
# own benchmarks (models/), the end-to-end ones against a real Gitea and the
# real sidecar binary (integration/bench_*_test.go), and, for the fixes
# made after profiling, the same end-to-end benchmarks against the tree
# before them (BENCH_BASELINE, a git revision; empty skips it). It prints
# the summary and writes the whole report; see bench/README.md.
#
#   make bench                      # or: bench/run.sh
#   BENCH_BASELINE= make bench      # without the before/after part
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The last commit before the fixes (benchmarks only).
baseline="${BENCH_BASELINE-cc474150bfecad3a32df7642e356424d547d5433}"
out=bench/RESULTS.md
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=1
go="${GO:-go}"

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

step() { echo "bench: $*" >&2; }

step "ledger benchmarks (models/)"
"$go" test -run '^$' -bench . -benchtime 2s ./models/ | tee "$work/models.txt" >&2
step "end-to-end benchmarks (integration/, real Gitea and sidecar)"
"$go" test -run '^$' -bench . -benchtime 1x -v -timeout 15m ./integration/ | tee "$work/e2e.txt" >&2

: >"$work/base-models.txt"
: >"$work/base-e2e.txt"
if [ -n "$baseline" ]; then
	if git cat-file -e "$baseline^{commit}" 2>/dev/null; then
		step "the same benchmarks before the fixes ($baseline)"
		mkdir "$work/base"
		git archive "$baseline" | tar -x -C "$work/base"
		# The same benchmark code, measuring the older service.
		cp integration/bench*_test.go "$work/base/integration/"
		(cd "$work/base" && "$go" test -run '^$' -bench 'List10k' -benchtime 2s ./models/) |
			tee "$work/base-models.txt" >&2 || step "the baseline ledger benchmark failed"
		(cd "$work/base" && "$go" test -run '^$' -bench 'SSHThroughput|ListLeases' -benchtime 1x -v -timeout 15m ./integration/) |
			tee "$work/base-e2e.txt" >&2 || step "the baseline end-to-end benchmarks failed"
	else
		step "baseline $baseline is not a commit of this repository; skipping before/after"
		baseline=""
	fi
fi
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

os="$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") ($(uname -srm))"
cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
ram="$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"

render() {
	awk -v started="$started" -v commit="$(git describe --always --dirty)" \
		-v nproc="$(nproc)" -v cpu="$cpu" -v ram="$ram" -v gover="$("$go" version | cut -d' ' -f3-)" \
		-v os="$os" -v load_before="$load_before" -v load_after="$load_after" -v baseline="$baseline" '
	FNR == 1 { src = (FILENAME ~ /base-models/ ? "base-models" : FILENAME ~ /base-e2e/ ? "base-e2e" : FILENAME ~ /models/ ? "models" : "e2e") }
	# Benchmark lines: name, iterations, then value/unit pairs.
	/^Benchmark/ && NF >= 4 {
		name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) M[src ":" name ":" $(i + 1)] = $i
	}
	/^    bench_[a-z_]+_test\.go:[0-9]+: / && src == "e2e" {
		line = $0; sub(/^    bench_[a-z_]+_test\.go:[0-9]+: /, "", line); notes[++nn] = line
	}
	function v(k) { return (k in M) ? M[k] : "n/a" }
	function x(k) { return (k in M) ? M[k] "×" : "n/a" }
	function n(k) { return (k in M) ? sprintf("%d", M[k]) : "n/a" }
	function ratio(a, b) { return ((a in M) && (b in M) && M[b] != 0) ? sprintf("%.2f×", M[a] / M[b]) : "n/a" }
	END {
		print "# Benchmark results"
		print ""
		print "Written by `make bench` (`bench/run.sh`), started " started " on commit `" commit "`."
		print "Each comparison was measured side by side in the same run; the absolute"
		print "figures are for context and move with the machine'"'"'s load. What each"
		print "benchmark does, what the profiles showed and what was fixed: `bench/README.md`."
		print ""
		print "## Machine"
		print ""
		print "- CPUs (`nproc`): " nproc
		print "- CPU: " cpu
		print "- RAM: " ram
		print "- Go: " gover
		print "- OS: " os
		print "- Load average (1, 5, 15 min) before the run: " load_before "; after: " load_after
		print "- Command: `make bench` (that is, `bench/run.sh`)"
		print ""
		print "## Results"
		print ""
		print "| # | measured | ratio | absolute |"
		print "|---|---|---|---|"
		e = "e2e:SSHFreshConnection:"
		print "| 1 | `ssh … collab-lease acquire` vs `ssh … collab-lease help`, fresh OpenSSH connection each, warm caches, medians of " n(e "samples-each") " each | acquire/help = **" x(e "acquire/help") "** | help p50 " v(e "help-p50-ms") " ms (p90 " v(e "help-p90-ms") "), acquire p50 " v(e "acquire-p50-ms") " ms (p90 " v(e "acquire-p90-ms") ") |"
		e = "e2e:SSHThroughput:"
		print "| 2 | 64 agents, one persistent SSH connection each (one session per command), cycling acquire/renew/release for " v(e "seconds") " s | acquires/s ÷ Gitea'"'"'s own issue GETs/s (same request, 8 at a time, measured right after) = **" x(e "acquires/gitea-GETs") "** | **" v(e "ops/s") " ops/s**, p50 **" v(e "p50-ms") " ms**, p99 **" v(e "p99-ms") " ms** (" n(e "ops") " ops, " n(e "exit75-retries") " retried after exit 75); acquire p50/p99 " v(e "acquire-p50-ms") "/" v(e "acquire-p99-ms") " ms (mean " v(e "acquire-mean-ms") "), renew " v(e "renew-p50-ms") "/" v(e "renew-p99-ms") " ms, release " v(e "release-p50-ms") "/" v(e "release-p99-ms") " ms; " v(e "acquires/s") " acquires/s vs " v(e "gitea-issue-GETs/s") " Gitea issue GETs/s; CPU in cores: Gitea " v(e "gitea-cores") ", sidecar " v(e "sidecar-cores") ", clients " v(e "clients-cores") " (ms per op: " v(e "gitea-cpu-ms/op") ", " v(e "sidecar-cpu-ms/op") ", " v(e "clients-cpu-ms/op") ") |"
		e = "e2e:ClaimSidecarVsGitea:"
		print "| 3a | claim through the sidecar (`acquire`) vs through Gitea (PATCH the issue'"'"'s assignees as the agent), persistent connections, medians of 50 | sidecar/Gitea = **" x(e "persistent-sidecar/gitea") "** | sidecar " v(e "persistent-sidecar-p50-ms") " ms, Gitea " v(e "persistent-gitea-p50-ms") " ms |"
		print "| 3b | the same, a fresh connection per claim (Go SSH client; HTTP without keep-alive) | sidecar/Gitea = **" x(e "fresh-sidecar/gitea") "** | sidecar " v(e "fresh-sidecar-p50-ms") " ms, Gitea " v(e "fresh-gitea-p50-ms") " ms |"
		print "| 3c | 20 agents race for one issue | told they won: sidecar **" n(e "sidecar-race-winners") "** of 20, Gitea **" n(e "gitea-race-winners") "** of 20 | the Gitea issue ended with " n(e "gitea-race-final-assignees") " assignee(s) (names under Notes) |"
		e = "e2e:ListLeases10k:"
		print "| 4a | `GET /api/v1/repos/acme/widgets/leases` with 10,000 live leases, anonymous, 200 requests, vs Gitea'"'"'s issue list page of the same repository, interleaved | leases/page = **" x(e "leases/page") "** | p50 **" v(e "p50-ms") " ms**, p99 **" v(e "p99-ms") " ms**, " v(e "body-KiB") " KiB per answer; Gitea page p50 " v(e "gitea-page-p50-ms") " ms; seeding 10,000 leases through models took " v(e "seed-s") " s |"
		e = "e2e:AssetBundle:"
		print "| 4b | badge bundle (JS + CSS), gzipped | gzip/raw = **" x(e "gzip/raw") "** | **" v(e "gzip-bytes") " bytes** gzipped (" v(e "raw-bytes") " raw) |"
		e = "e2e:SidecarMemory:"
		print "| 5 | sidecar RSS idle vs with 1,000 open authenticated SSH connections (idle sessions) | loaded/idle = **" x(e "loaded/idle") "** | idle **" v(e "idle-RSS-MiB") " MiB**, loaded **" v(e "1000conn-RSS-MiB") " MiB**, " v(e "KiB/conn") " KiB per connection; " v(e "handshakes/s") " handshakes/s while opening them |"
		m = "models:Cycle64/"
		print "| L | ledger alone: 64 goroutines cycling acquire/renew/release, group commit vs one transaction per write | group/single = **" ratio(m "group-commit:ops/s", m "commit-per-write:ops/s") "** | " v(m "group-commit:ops/s") " vs " v(m "commit-per-write:ops/s") " ops/s; single-threaded acquire+release " v("models:AcquireRelease:ops/s") " ops/s |"
		print ""
		if (baseline != "") {
			print "## Fixes: before and after"
			print ""
			print "Before: commit `" baseline "` (the benchmarks alone), measured in this same run with the same benchmark code; after: this tree."
			print ""
			print "| measure | before | after |"
			print "|---|---|---|"
			b = "base-e2e:SSHThroughput:"; a = "e2e:SSHThroughput:"
			print "| throughput, 64 agents (ops/s) | " v(b "ops/s") " | " v(a "ops/s") " |"
			print "| commands answered exit 75 (forge timeout) and retried | " n(b "exit75-retries") " | " n(a "exit75-retries") " |"
			print "| throughput p50 / p99 (ms) | " v(b "p50-ms") " / " v(b "p99-ms") " | " v(a "p50-ms") " / " v(a "p99-ms") " |"
			print "| acquire p50 / p99 / mean (ms) | " v(b "acquire-p50-ms") " / " v(b "acquire-p99-ms") " / " v(b "acquire-mean-ms") " | " v(a "acquire-p50-ms") " / " v(a "acquire-p99-ms") " / " v(a "acquire-mean-ms") " |"
			print "| renew p50 / p99 (ms) | " v(b "renew-p50-ms") " / " v(b "renew-p99-ms") " | " v(a "renew-p50-ms") " / " v(a "renew-p99-ms") " |"
			print "| release p50 / p99 (ms) | " v(b "release-p50-ms") " / " v(b "release-p99-ms") " | " v(a "release-p50-ms") " / " v(a "release-p99-ms") " |"
			print "| sidecar CPU per op (ms) | " v(b "sidecar-cpu-ms/op") " | " v(a "sidecar-cpu-ms/op") " |"
			b = "base-e2e:ListLeases10k:"; a = "e2e:ListLeases10k:"
			print "| `GET …/leases`, 10,000 leases, p50 / p99 (ms) | " v(b "p50-ms") " / " v(b "p99-ms") " | " v(a "p50-ms") " / " v(a "p99-ms") " |"
			print "| seeding 10,000 leases from 16 goroutines (s) | " v(b "seed-s") " | " v(a "seed-s") " |"
			print "| ledger `List` of 10,000 leases (ms/op) | " sprintf("%.1f", v("base-models:List10k:ns/op") / 1e6) " | " sprintf("%.1f", v("models:List10k:ns/op") / 1e6) " |"
			print "| ledger, 64 goroutines (ops/s): one transaction per write vs group commit | " v("models:Cycle64/commit-per-write:ops/s") " | " v("models:Cycle64/group-commit:ops/s") " |"
			print ""
		}
		print "## Notes from the run"
		print ""
		for (i = 1; i <= nn; i++) print "- " notes[i]
		print ""
	}' "$work/models.txt" "$work/e2e.txt" "$work/base-models.txt" "$work/base-e2e.txt"
}

{
	render
	echo "## Raw output"
	echo
	echo '```'
	cat "$work/models.txt" "$work/e2e.txt"
	if [ -n "$baseline" ]; then
		echo
		echo "# before the fixes ($baseline):"
		cat "$work/base-models.txt" "$work/base-e2e.txt"
	fi
	echo '```'
} >"$out"
render | sed -n '/^## Results/,/^## Notes/p' | sed '$d'
step "wrote $out"
