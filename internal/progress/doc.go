// Package progress shows progress bars with rate and ETA on long work
// (imports, generation, epochs). On a terminal it redraws one line in place
// at most ten times a second; on a pipe or file it prints at most one line
// every five seconds (the first only after five seconds, so short tasks
// print nothing) so logs stay readable. A nil *Bar is valid and does
// nothing, so library code can take an optional bar.
//
// It draws the bar itself rather than using a terminal-bar library: the one
// we used pulled net/http into the binary, adding seconds to every cold
// build of `go run ./cmd/strata`.
//
// Phases (phases.go) times the consecutive phases of a long task, a
// training run's setup for instance: each running phase shows a bar with
// an ETA when it counts its work, else how long it has run, and the
// recorded spans (per device where devices work concurrently) go into
// reports and a one-line summary.
package progress
