//go:build race

package main

// raceDetector is true in a -race build: tests that only check flag
// validation, or compare one in-process run's results end to end (their
// engines are race-tested in their own packages), skip there, since the
// non-race pass runs them and CI's time is better spent on concurrency.
const raceDetector = true
