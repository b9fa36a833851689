package watch

import (
	"sync"
	"time"
)

// Loop waits for wake, then calls check every interval with mu held for
// as long as check reports that work remains; it returns when stop is
// closed. A tick at which mu is busy is skipped: the call holding it
// waits on the same operations and watches them itself.
func Loop(stop, wake <-chan struct{}, interval time.Duration, mu *sync.Mutex, check func() bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-wake:
		}
		for busy := true; busy; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if !mu.TryLock() {
				continue
			}
			busy = check()
			mu.Unlock()
		}
	}
}
