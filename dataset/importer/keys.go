package importer

import (
	"slices"
	"strconv"
	"strings"
)

// key is a node ID or class name read from a table: an integer, or text
// that is not a canonical integer. IDs compare as text, so the integer 7
// (a Parquet int column) and the CSV cell "7" are the same key, while
// "007" is text and differs from both.
type key struct {
	isInt bool
	i     int64
	s     []byte // valid only during the call that receives it
}

// textKey classifies a CSV cell: canonical decimal integers ("0", "42",
// "-7"; no sign "+", no leading zeros) become integer keys, anything else
// stays text, so converting an integer key back to text gives the cell.
func textKey(b []byte) key {
	if canonicalInt(b) {
		if v, ok := parseInt(b); ok {
			return key{isInt: true, i: v}
		}
	}
	return key{s: b}
}

func canonicalInt(b []byte) bool {
	d := b
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 19 || (d[0] == '0' && (len(d) > 1 || len(b) > 1)) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// keySpace numbers distinct keys 0, 1, 2, ... in the order they are added.
// It holds integers until the first text key arrives, then switches every
// key to its text form (numbers are unchanged). A node table's IDs that
// equal their row numbers (0, 1, 2, ...) are counted without a map until
// the first one that does not.
type keySpace struct {
	identity int32 // keys 0..identity-1 are the integers 0..identity-1, not in the maps
	mapped   bool  // the maps are in use (identity is then 0)
	ints     map[int64]int32
	intKeys  []int64
	strs     map[string]int32 // non-nil: text mode; every key is here
	strKeys  []string
	scratch  []byte
}

func (ks *keySpace) count() int32 {
	if !ks.mapped {
		return ks.identity
	}
	if ks.strs != nil {
		return int32(len(ks.strKeys))
	}
	return int32(len(ks.intKeys))
}

// materialize moves the identity prefix into the maps.
func (ks *keySpace) materialize() {
	if ks.mapped {
		return
	}
	ks.mapped = true
	ks.ints = make(map[int64]int32, ks.identity)
	ks.intKeys = make([]int64, ks.identity)
	for i := range ks.identity {
		ks.ints[int64(i)] = i
		ks.intKeys[i] = int64(i)
	}
	ks.identity = 0
}

// toText switches to text mode.
func (ks *keySpace) toText() {
	ks.materialize()
	if ks.strs != nil {
		return
	}
	ks.strs = make(map[string]int32, len(ks.intKeys))
	ks.strKeys = make([]string, len(ks.intKeys))
	for i, v := range ks.intKeys {
		s := strconv.FormatInt(v, 10)
		ks.strs[s] = int32(i)
		ks.strKeys[i] = s
	}
	ks.ints, ks.intKeys = nil, nil
}

func (ks *keySpace) text(k key) []byte {
	if k.isInt {
		ks.scratch = strconv.AppendInt(ks.scratch[:0], k.i, 10)
		return ks.scratch
	}
	return k.s
}

// lookup returns the number of k, if it has one.
func (ks *keySpace) lookup(k key) (int32, bool) {
	if !ks.mapped {
		if k.isInt && k.i >= 0 && k.i < int64(ks.identity) {
			return int32(k.i), true
		}
		return 0, false
	}
	if ks.strs != nil {
		v, ok := ks.strs[string(ks.text(k))]
		return v, ok
	}
	if !k.isInt {
		return 0, false
	}
	v, ok := ks.ints[k.i]
	return v, ok
}

// add gives k the next number; if k already has one, it returns that and
// dup = true (a node table that repeats an ID).
func (ks *keySpace) add(k key) (idx int32, dup bool) {
	if !ks.mapped && k.isInt && k.i == int64(ks.identity) {
		ks.identity++
		return ks.identity - 1, false
	}
	if v, ok := ks.lookup(k); ok {
		return v, true
	}
	return ks.insert(k), false
}

// intern returns k's number, giving it the next one if it has none.
func (ks *keySpace) intern(k key) int32 {
	if v, ok := ks.lookup(k); ok {
		return v
	}
	return ks.insert(k)
}

func (ks *keySpace) insert(k key) int32 {
	ks.materialize()
	if !k.isInt {
		ks.toText()
	}
	n := ks.count()
	if ks.strs != nil {
		s := string(ks.text(k))
		ks.strs[s] = n
		ks.strKeys = append(ks.strKeys, s)
	} else {
		ks.ints[k.i] = n
		ks.intKeys = append(ks.intKeys, k.i)
	}
	return n
}

// sortedPerm returns perm with perm[old] = the rank of key old in
// ascending order (integers numerically, text bytewise), and the keys in
// that order.
func (ks *keySpace) sortedPerm() (perm []int32, ids *NodeIDs) {
	ks.materialize()
	n := int(ks.count())
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	ids = &NodeIDs{}
	if ks.strs != nil {
		slices.SortFunc(order, func(a, b int32) int { return strings.Compare(ks.strKeys[a], ks.strKeys[b]) })
		ids.Strs = make([]string, n)
		for r, o := range order {
			ids.Strs[r] = ks.strKeys[o]
		}
	} else {
		slices.SortFunc(order, func(a, b int32) int {
			x, y := ks.intKeys[a], ks.intKeys[b]
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		ids.Ints = make([]int64, n)
		for r, o := range order {
			ids.Ints[r] = ks.intKeys[o]
		}
	}
	perm = make([]int32, n)
	for r, o := range order {
		perm[o] = int32(r)
	}
	return perm, ids
}

// list returns the keys by number, or nil while they are the identity.
func (ks *keySpace) list() *NodeIDs {
	if !ks.mapped {
		return nil
	}
	if ks.strs != nil {
		return &NodeIDs{Strs: ks.strKeys}
	}
	return &NodeIDs{Ints: ks.intKeys}
}

// NodeIDs lists the original ID of every node, by node number: Ints when
// every ID was an integer, otherwise Strs.
type NodeIDs struct {
	Ints []int64
	Strs []string
}

// Len returns the number of IDs.
func (n *NodeIDs) Len() int {
	if n.Strs != nil {
		return len(n.Strs)
	}
	return len(n.Ints)
}

// String returns the ID of node i as text.
func (n *NodeIDs) String(i int) string {
	if n.Strs != nil {
		return n.Strs[i]
	}
	return strconv.FormatInt(n.Ints[i], 10)
}
