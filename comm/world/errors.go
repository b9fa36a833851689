package world

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// PeerError reports a failure that other processes caused or saw: they
// died, stalled past a deadline, closed their communicators, or never
// arrived. It names them, with their hosts and ranks.
type PeerError struct {
	Processes []Process
	Ranks     []int // the ranks found missing
	Err       error
}

func (e *PeerError) Error() string {
	names := make([]string, len(e.Processes))
	for i, p := range e.Processes {
		names[i] = p.String()
	}
	return fmt.Sprintf("world: %s failed, stalled or left: %v", strings.Join(names, ", "), e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// MissingRanks returns the ranks missing.
func (e *PeerError) MissingRanks() []int { return e.Ranks }

// missingRanks collects the ranks named by the first error of err's tree
// that names some (comm's *OpError, *PeerError and *AbortError).
func missingRanks(err error) []int {
	var walk func(error) []int
	walk = func(err error) []int {
		for err != nil {
			if m, ok := err.(interface{ MissingRanks() []int }); ok && len(m.MissingRanks()) > 0 {
				return m.MissingRanks()
			}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					if r := walk(e); len(r) > 0 {
						return r
					}
				}
				return nil
			}
			err = errors.Unwrap(err)
		}
		return nil
	}
	r := slices.Clone(walk(err))
	slices.Sort(r)
	return slices.Compact(r)
}

// Explain names the processes behind a failure: when err names missing
// ranks of other processes (a communicator's *OpError, a peer lost, an
// abort), it returns a *PeerError naming those processes, their hosts
// and ranks; otherwise err itself. One process: err itself.
func (w *World) Explain(err error) error {
	if err == nil || !w.Multi() {
		return err
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	var ae *AbortError
	if errors.As(err, &ae) {
		return err
	}
	ranks := missingRanks(err)
	var procs []Process
	var missing []int
	for _, r := range ranks {
		if r < 0 || r >= w.size || w.IsLocal(r) {
			continue
		}
		missing = append(missing, r)
		p := w.Owner(r)
		if len(procs) == 0 || procs[len(procs)-1].Index != p.Index {
			procs = append(procs, p)
		}
	}
	if len(procs) == 0 {
		return err
	}
	return &PeerError{Processes: procs, Ranks: missing, Err: err}
}

// jsonDiff names the first place where two JSON documents differ (keys
// in sorted order), with both values; ("", a, b) when they do not parse.
func jsonDiff(a, b []byte) (path, va, vb string) {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return "", short(string(a)), short(string(b))
	}
	p, u, v, ok := diffValue("", x, y)
	if !ok {
		return "", short(string(a)), short(string(b))
	}
	return p, u, v
}

func diffValue(path string, x, y any) (string, string, string, bool) {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(xv)+len(yv))
		for k := range xv {
			keys = append(keys, k)
		}
		for k := range yv {
			if _, ok := xv[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			a, inA := xv[k]
			b, inB := yv[k]
			switch {
			case !inA:
				return p, "unset", render(b), true
			case !inB:
				return p, render(a), "unset", true
			}
			if q, u, v, ok := diffValue(p, a, b); ok {
				return q, u, v, true
			}
		}
		return "", "", "", false
	case []any:
		yv, ok := y.([]any)
		if !ok || len(xv) != len(yv) {
			break
		}
		for i := range xv {
			if q, u, v, ok := diffValue(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i]); ok {
				return q, u, v, true
			}
		}
		return "", "", "", false
	default:
		if render(x) == render(y) {
			return "", "", "", false
		}
	}
	if path == "" {
		path = "(the whole configuration)"
	}
	return path, render(x), render(y), true
}

func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return short(string(b))
}

// short keeps messages readable (a value may be a long list).
func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
