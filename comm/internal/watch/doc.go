// Package watch runs the watchdog loop of the device communicators whose
// operations return once queued (comm/nccl and comm/gpushm with
// Options.Async): between calls, something must notice that a queued
// operation completed or missed its deadline, without ever blocking the
// calls themselves.
package watch
