// Package gputest opens CUDA devices for tests, once per test binary, and
// skips the test when there are none (or too few).
package gputest
