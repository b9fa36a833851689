//go:build race

package main

// raceDetector is true in a -race build: tests that only check flag
// validation (no goroutines of their own) skip there, since the
// non-race pass runs them and CI's time is better spent on concurrency.
const raceDetector = true
