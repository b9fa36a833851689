package comm_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestPeerMismatch: the descriptor comparison transports use names the
// first difference (operation and number, dtype, or count).
func TestPeerMismatch(t *testing.T) {
	mine := comm.Desc{Seq: 4, Op: comm.OpAllGather, DType: backend.Float32, Count: 3}
	tests := []struct {
		theirs comm.Desc
		want   string
	}{
		{mine, ""},
		{comm.Desc{Seq: 5, Op: comm.OpAllGather, DType: backend.Float32, Count: 3},
			"rank 1 is in all_gather #5 while rank 0 is in all_gather #4"},
		{comm.Desc{Seq: 4, Op: comm.OpAllGather, Phase: comm.PhaseDebug, DType: backend.Int64, Count: 3},
			"rank 1 is in all_gather #4 (debug check) while rank 0 is in all_gather #4"},
		{comm.Desc{Seq: 4, Op: comm.OpAllGather, DType: backend.Int32, Count: 3},
			"rank 1 passed int32 to all_gather #4, rank 0 passed float32"},
		{comm.Desc{Seq: 4, Op: comm.OpAllGather, DType: backend.Float32, Count: 1},
			"rank 1 passed 1 element to all_gather #4, rank 0 passed 3 (every rank must pass the same count)"},
		{comm.Desc{Seq: 4, Op: comm.OpAllGather, DType: backend.Float32, Count: 2},
			"rank 1 passed 2 elements to all_gather #4, rank 0 passed 3 (every rank must pass the same count)"},
	}
	for _, tc := range tests {
		err := comm.PeerMismatch(mine, tc.theirs, 0, 1)
		if tc.want == "" {
			if err != nil {
				t.Fatalf("PeerMismatch(equal) = %v", err)
			}
			continue
		}
		var me *comm.MismatchError
		if !errors.As(err, &me) || me.Seq != 4 || me.Diff != tc.want || !errors.Is(err, comm.ErrMismatch) {
			t.Fatalf("PeerMismatch(%+v) = %v, want diff %q", tc.theirs, err, tc.want)
		}
		if err.Error() != comm.ErrMismatch.Error()+": "+tc.want {
			t.Fatalf("Error() = %q", err)
		}
	}
	err := comm.BlockMismatch(mine, 2, 0, 1, 5)
	if err.Error() != "ranks issued different operations: rank 0 sends 1 element in all_gather #4, rank 2 expects 5 from it" {
		t.Fatalf("BlockMismatch = %q", err)
	}
}

// TestDescOf: the agreed count per operation, for host and device calls.
func TestDescOf(t *testing.T) {
	send, recv := cpu.WrapF32(make([]float32, 2)), cpu.WrapF32(make([]float32, 6))
	tests := []struct {
		op   comm.Op
		want int64
	}{
		{comm.OpAllReduce, 6}, {comm.OpBroadcast, 6}, {comm.OpAllGatherV, 6},
		{comm.OpAllGather, 2}, {comm.OpAllToAll, 2}, {comm.OpReduceScatter, 2},
		{comm.OpAllToAllV, -1}, {comm.OpBarrier, 0},
	}
	for _, tc := range tests {
		d := comm.DeviceDescOf(&comm.DeviceCall{Op: tc.op, Seq: 9, DType: backend.Float32, Send: send, Recv: recv})
		if d.Count != tc.want || d.Seq != 9 || d.Op != tc.op || d.DType != backend.Float32 {
			t.Fatalf("DeviceDescOf(%v) = %+v, want count %d", tc.op, d, tc.want)
		}
		h := comm.DescOf(&comm.Call{Op: tc.op, DType: backend.Float32, Send: make([]byte, 8), Recv: make([]byte, 24)})
		if h.Count != tc.want {
			t.Fatalf("DescOf(%v).Count = %d, want %d", tc.op, h.Count, tc.want)
		}
	}
	if d := comm.DeviceDescOf(&comm.DeviceCall{Op: comm.OpBarrier}); d.Count != 0 {
		t.Fatalf("barrier without buffers: count %d", d.Count)
	}
	if d := comm.DescOf(&comm.Call{Op: comm.OpBarrier}); d.Count != 0 {
		t.Fatalf("barrier without dtype: count %d", d.Count)
	}
}

// TestNamesAndErrors: operation and reduction names, validity and the
// error types' texts and unwrapping.
func TestNamesAndErrors(t *testing.T) {
	if comm.Op(0).Valid() || comm.Op(9).Valid() || !comm.OpBarrier.Valid() || comm.Op(9).String() != "op(9)" {
		t.Fatal("Op.Valid/String out of range")
	}
	if comm.ReduceOp(0).Valid() || !comm.Max.Valid() || comm.Max.String() != "max" || comm.Mean.String() != "mean" {
		t.Fatal("ReduceOp.Valid/String")
	}
	ae := &comm.AbortError{By: 2, Seq: 7, Missing: []int{1}, Reason: "boom"}
	if ae.Error() != "aborted by a peer by rank 2 at #7: boom" || !errors.Is(ae, comm.ErrAborted) || !slices.Equal(ae.MissingRanks(), []int{1}) {
		t.Fatalf("AbortError = %q", ae)
	}
	pe := &comm.PeerError{Ranks: []int{3}, Err: comm.ErrPeerLost}
	if pe.Error() != "ranks [3]: peer lost" || !errors.Is(pe, comm.ErrPeerLost) || !slices.Equal(pe.MissingRanks(), []int{3}) {
		t.Fatalf("PeerError = %q", pe)
	}
	pe.Msg = "connection reset"
	if pe.Error() != "peer lost: connection reset" {
		t.Fatalf("PeerError with Msg = %q", pe)
	}
	if !errors.Is(comm.ErrTimeout, comm.ErrTimeout) || comm.ErrTimeout.Error() != "deadline exceeded" {
		t.Fatal("ErrTimeout")
	}
}
