package csp

import (
	"encoding/binary"
	"errors"
	"testing"
)

// typedHeaderWords builds the header words a rank reads in a batched hop
// of P ranks: per relation i, rank q's row to this rank says counts[i][q]
// nodes, and this rank's own rows send sent[i][q] to rank q (fanout
// ks[i], hop 1 of 2).
func typedHeaderWords(P int, ks []int, counts, sent [][]int64, status int64) []int64 {
	nS := len(ks)
	hw := make([]int64, 2*P*nS*HeaderWords)
	for i, k := range ks {
		var nF int64
		for _, c := range sent[i] {
			nF += c
		}
		for q := range P {
			s := hw[(q*nS+i)*HeaderWords:]
			s[hCount], s[hKey], s[hHop], s[hFanout], s[hHops], s[hNF] = sent[i][q], 7, 1, int64(k), 2, nF
			r := hw[P*nS*HeaderWords+(q*nS+i)*HeaderWords:]
			r[hStatus], r[hCount], r[hKey], r[hHop], r[hFanout], r[hHops], r[hNF] = status, counts[i][q], int64(q), 1, int64(k), 2, counts[i][q]+1
		}
	}
	return hw
}

// TestReadTypedHeader: the batched header's rows are read per relation
// (each relation's counts, the requesters' keys), and a peer's failure,
// a relation at another fanout or words of the wrong length are refused
// naming the relation.
func TestReadTypedHeader(t *testing.T) {
	ks := []int{3, -1}
	counts := [][]int64{{2, 5}, {0, 4}}
	sent := [][]int64{{1, 3}, {6, 0}}
	hw := typedHeaderWords(2, ks, counts, sent, stOK)
	pls, _, kind, msg := readTypedHeader(hw, 2, 0, 1, 2, ks, []int64{10, 10}, []int64{8, 8})
	if kind != nil {
		t.Fatalf("%v: %s", kind, msg)
	}
	for i, pl := range pls {
		if pl.nF != sent[i][0]+sent[i][1] || pl.R != counts[i][0]+counts[i][1] || pl.recvN[1] != counts[i][1] || pl.sendN[0] != sent[i][0] || pl.keys[1] != 1 {
			t.Errorf("relation %d: plan %+v", i, pl)
		}
	}
	// Relation 1's row from rank 1 is at another fanout.
	bad := append([]int64(nil), hw...)
	bad[2*2*HeaderWords+(1*2+1)*HeaderWords+hFanout] = 5 // received rows: P*nS after the sent ones
	if _, i, kind, _ := readTypedHeader(bad, 2, 0, 1, 2, ks, []int64{10, 10}, []int64{8, 8}); !errors.Is(kind, ErrProtocol) || i != 1 {
		t.Errorf("another fanout: relation %d, %v; want relation 1, ErrProtocol", i, kind)
	}
	failed := typedHeaderWords(2, ks, counts, sent, stFailed)
	if _, _, kind, _ := readTypedHeader(failed, 2, 0, 1, 2, ks, []int64{10, 10}, []int64{8, 8}); !errors.Is(kind, ErrPeer) {
		t.Errorf("a failed peer: %v, want ErrPeer", kind)
	}
	if _, i, kind, _ := readTypedHeader(hw[:len(hw)-1], 2, 0, 1, 2, ks, []int64{10, 10}, []int64{8, 8}); !errors.Is(kind, ErrProtocol) || i != -1 {
		t.Errorf("short words: relation %d, %v; want -1, ErrProtocol", i, kind)
	}
}

// FuzzReadTypedHeader: whatever the header and totals words, the batched
// hop's parsers return plans whose sizes add up (or an error), never
// panic, and never accept a peer's failure.
func FuzzReadTypedHeader(f *testing.F) {
	enc := func(hdr []byte, words []int64) []byte {
		for _, w := range words {
			hdr = binary.LittleEndian.AppendUint64(hdr, uint64(w))
		}
		return hdr
	}
	ks := []int{3, -1}
	counts, sent := [][]int64{{2, 5}, {0, 4}}, [][]int64{{1, 3}, {6, 0}}
	good := typedHeaderWords(2, ks, counts, sent, stOK)
	tot := []int64{0, 4, 0, 9} // rank q's totals row for relation 1
	f.Add(enc([]byte{2, 2, 0, 3, 0xff}, append(good, tot...)))
	f.Add(enc([]byte{2, 2, 0, 3, 0xff}, typedHeaderWords(2, ks, counts, sent, stFailed)))
	f.Add(enc([]byte{2, 2, 1, 3, 0xff}, good[:10]))
	f.Add(enc([]byte{1, 1, 0, 2}, typedHeaderWords(1, []int{2}, [][]int64{{3}}, [][]int64{{3}}, stOK)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		P, nS := 1+int(data[0])%4, 1+int(data[1])%3
		data = data[2:]
		rank := 0
		if len(data) > 0 {
			rank, data = int(data[0])%P, data[1:]
		}
		ks := make([]int, nS)
		for i := range ks {
			ks[i] = 3
			if len(data) > 0 {
				ks[i], data = int(int8(data[0]))%6, data[1:]
				if ks[i] == 0 {
					ks[i] = -1
				}
			}
		}
		var words []int64
		for len(data) >= 8 {
			words, data = append(words, int64(binary.LittleEndian.Uint64(data))), data[8:]
		}
		W := 2 * P * nS * HeaderWords
		hw := words[:min(len(words), W)]
		fcaps, rows := make([]int64, nS), make([]int64, nS)
		for i := range nS {
			fcaps[i], rows[i] = 100, 50
		}
		pls, bad, kind, _ := readTypedHeader(hw, P, rank, 1, 2, ks, fcaps, rows)
		if kind != nil {
			if bad < -1 || bad >= nS {
				t.Fatalf("relation %d of %d", bad, nS)
			}
			return
		}
		for q := range P {
			for i := range nS {
				if st := hw[P*nS*HeaderWords+(q*nS+i)*HeaderWords+hStatus]; q != rank && st != stOK {
					t.Fatalf("rank %d's status %d accepted", q, st)
				}
			}
		}
		for i, pl := range pls {
			var s, r int64
			for q := range P {
				if pl.sendN[q] < 0 || pl.recvN[q] < 0 || pl.recvN[q] > rows[i] || pl.roff[q+1]-pl.roff[q] != pl.recvN[q] {
					t.Fatalf("relation %d: plan %+v", i, pl)
				}
				s, r = s+pl.sendN[q], r+pl.recvN[q]
			}
			if s != pl.nF || pl.nF > fcaps[i] || r != pl.R || pl.R > maxEntries {
				t.Fatalf("relation %d: plan %+v", i, pl)
			}
		}
		// The totals of the relations at fanout -1, from the words after.
		var xs []*plan
		for i, k := range ks {
			if k < 0 {
				xs = append(xs, pls[i])
			}
		}
		rest := words[len(hw):]
		if len(xs) == 0 || len(rest) < P*len(xs)*tWords {
			return
		}
		for i, tw := range splitRows(rest[:P*len(xs)*tWords], P, len(xs), tWords) {
			pl := xs[i]
			if kind, _ := pl.readTotals(tw, -1); kind == nil {
				var sum int64
				for q := range P {
					if pl.rtot[q] < 0 || pl.S[q] != sum {
						t.Fatalf("totals %v: rtot %v S %v", tw, pl.rtot, pl.S)
					}
					sum += pl.rtot[q]
				}
				if sum != pl.Erecv || pl.nF+sum > maxEntries {
					t.Fatalf("totals %v: %d edges back", tw, pl.Erecv)
				}
			}
		}
	})
}
