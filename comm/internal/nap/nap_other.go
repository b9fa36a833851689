//go:build !linux

package nap

import "time"

// Sleep sleeps for about d (time.Sleep: no finer timer here).
func Sleep(d time.Duration) { time.Sleep(d) }
