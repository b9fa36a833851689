package world

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// machineKey is what decides "same machine": the host id, else the
// host name (a process described by Single).
func (p Process) machineKey() string {
	if p.hostID != "" {
		return p.hostID
	}
	return p.Host
}

// Machines groups the job's processes by machine, machines numbered in
// the order of their first process (process 0 is on machine 0).
func (w *World) Machines() [][]Process {
	var out [][]Process
	idx := map[string]int{}
	for _, p := range w.procs {
		m, ok := idx[p.machineKey()]
		if !ok {
			m = len(out)
			idx[p.machineKey()] = m
			out = append(out, nil)
		}
		out[m] = append(out[m], p)
	}
	return out
}

// MachineOf is the machine (Machines' index) of process p.
func (w *World) MachineOf(p int) int {
	for m, ps := range w.Machines() {
		for _, q := range ps {
			if q.Index == p {
				return m
			}
		}
	}
	return -1
}

// Exchange publishes this process's value under name and returns every
// process's, in process order (a lone process gets its own). Every
// process must call it with the same name, once; a process that never
// publishes is named when the setup timeout ends the wait.
func (w *World) Exchange(ctx context.Context, name string, mine []byte) ([][]byte, error) {
	return w.exchange(ctx, name, mine, true)
}

// Gather is Exchange in which only process 0 reads: the others publish
// and return nil at once. Use it at the end of a job, where process 0 may
// be done (and its store gone) before another would have read its value.
func (w *World) Gather(ctx context.Context, name string, mine []byte) ([][]byte, error) {
	return w.exchange(ctx, name, mine, w.me == 0)
}

func (w *World) exchange(ctx context.Context, name string, mine []byte, read bool) ([][]byte, error) {
	if w.store == nil {
		return [][]byte{mine}, nil
	}
	ctx, cancel := w.bound(ctx)
	defer cancel()
	prefix := "world/exchange/" + name + "/"
	if err := w.store.Set(ctx, prefix+strconv.Itoa(w.me), mine); err != nil {
		return nil, fmt.Errorf("world: publishing %s: %w", name, err)
	}
	if !read {
		return nil, nil
	}
	out := make([][]byte, len(w.procs))
	for p := range w.procs {
		if p == w.me {
			out[p] = mine
			continue
		}
		v, err := w.get(ctx, prefix+strconv.Itoa(p))
		if err != nil {
			var ae *AbortError
			if errors.As(err, &ae) {
				return nil, err
			}
			return nil, &PeerError{Processes: []Process{w.procs[p]}, Ranks: w.procs[p].Ranks(), Err: fmt.Errorf("never published its %s: %w", name, err)}
		}
		out[p] = v
	}
	return out, nil
}

// MachineInfo is one machine's entry of a job's report (Info.PerMachine):
// what its processes moved, per link class, and how long its requests
// for other machines' feature rows took.
type MachineInfo struct {
	Machine   int    `json:"machine"`
	Host      string `json:"host"`
	Processes []int  `json:"processes"`
	Ranks     []int  `json:"ranks"`
	// Bytes per link class (local, peer, host, network), every purpose.
	Bytes map[string]int64 `json:"bytes"`
	// RemoteFeatures is nil when the machine read no other machine's
	// rows (asked, or from its hot rows).
	RemoteFeatures *RemoteFeatures `json:"remote_features,omitempty"`
}

// RemoteFeatures sums a machine's requests for other machines' rows.
type RemoteFeatures struct {
	Requests int64   `json:"requests"`
	Rows     int64   `json:"rows"`
	Bytes    int64   `json:"bytes"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	// HotRows is the rows of other machines read from the machine's own
	// copy of the hot rows (never asked of anyone), and HotDeviceRows
	// those of them the devices read from their memory (the others were
	// copied from host memory per batch).
	HotRows       int64 `json:"hot_rows"`
	HotDeviceRows int64 `json:"hot_device_rows"`
}
