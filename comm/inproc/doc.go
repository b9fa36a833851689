// Package inproc is the in-process communication back end: the ranks are
// goroutines of one process (CPU virtual devices) sharing memory. Each
// collective is two barriers: all ranks post their call, then every rank
// does its share of the work directly on the other ranks' buffers (rank r
// reduces chunk r of an all-reduce, in rank order, and writes it to every
// rank), then all ranks wait until everyone is done before returning.
//
// A rank that stalls makes the others fail at their deadline naming it; a
// rank that closes its communicator makes the others fail at once.
package inproc
