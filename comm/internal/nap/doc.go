// Package nap gives the communication back ends' wait loops a short
// sleep that lasts about as long as asked.
//
// A sub-millisecond time.Sleep lasts about a millisecond when the Go
// runtime has nothing else to do (its timers then wait in epoll_wait,
// which counts in milliseconds), so a wait loop that had stopped spinning
// noticed a finished copy or kernel up to a millisecond late. Sleep uses
// nanosleep on the calling thread with a 1 us timer slack instead (a
// 20 us nap lasts about 25 us) on Linux, and time.Sleep elsewhere.
package nap
