package serve

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// Three servers, one per part of a range partition: each samples only
// the seeds it owns, input_id still indexes the whole split, the parts
// together cover it once, and every batch is the one the sampler draws
// for its own key (batch * parts + part).
func TestOwnedStreams(t *testing.T) {
	ds := tiny(t)
	bk, err := book.Even(ds.NumNodes(), 3)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: []int{4, 2}})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *servepb.SampleRequest {
		return &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 30, Fanouts: []int32{4, 2}, Shuffle: true,
			Seed: 8, Epoch: 1, Rank: 1, WorldSize: 2, WithLabels: true, Owned: true, Workers: 2}
	}
	covered := map[int64]int{}
	keys := map[int]bool{}
	for p := range 3 {
		_, addr := start(t, Options{Partition: &Partition{Book: bk, Part: p, Fingerprint: "fp"}})
		c := dial(t, addr, ClientOptions{})
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := bk.Range(p)
		var own []graph.NodeID
		var pos []int32
		for k, v := range ds.Train {
			if int64(v) >= lo && int64(v) < hi {
				own, pos = append(own, v), append(pos, int32(k))
			}
		}
		pi := info.Partition
		if pi == nil || pi.Part != uint32(p) || pi.NumParts != 3 || !slices.Equal(pi.Offsets, bk.Offsets()) || pi.Fingerprint != "fp" ||
			pi.NumTrain != int64(len(own)) || pi.NumVal+pi.NumTest == 0 {
			t.Fatalf("part %d: info %v", p, pi)
		}
		got := collect(t, c, req())
		e := Epoch{BatchSize: 30, Shuffle: true, Seed: 8, Epoch: 1, Rank: 1, World: 2, Part: p, Parts: 3}
		order, err := Plan(len(own), e)
		if err != nil {
			t.Fatal(err)
		}
		if nb := NumBatches(len(own), 30, 2, false); len(got) != nb || nb < 2 {
			t.Fatalf("part %d: %d batches, want %d", p, len(got), nb)
		}
		for i, b := range got {
			if int(b.Index) != i || int(b.NumBatches) != len(got) {
				t.Fatalf("part %d: batch %d says %d of %d", p, i, b.Index, b.NumBatches)
			}
			sel := order[i*30 : min((i+1)*30, len(order))]
			seeds := make([]graph.NodeID, len(sel))
			in := make([]int64, len(sel))
			for k, q := range sel {
				seeds[k], in[k] = own[q], int64(pos[q])
				covered[int64(pos[q])]++
			}
			mb, err := ns.Sample(seeds, e.Key(i))
			if err != nil {
				t.Fatal(err)
			}
			want, err := FromMiniBatch(mb, NewRelabeler(ds.NumNodes()), ds.NumNodes())
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, ds, b, want, in)
			if keys[e.Key(i).Batch] {
				t.Fatalf("key %d drawn twice", e.Key(i).Batch)
			}
			keys[e.Key(i).Batch] = true
		}
	}
	// Rank 1 of 2 takes every other seed of each part (a part's odd count
	// wraps around): together the parts cover half the split, once or
	// twice each (the wrap).
	if len(covered) < len(ds.Train)/2-3 || len(covered) > len(ds.Train)/2+3 {
		t.Fatalf("rank 1 covered %d of %d training seeds", len(covered), len(ds.Train))
	}
	for q, n := range covered {
		if n > 2 || q < 0 || q >= int64(len(ds.Train)) {
			t.Fatalf("seed position %d covered %d times", q, n)
		}
	}
}

func TestOwnedRefusals(t *testing.T) {
	ds := tiny(t)
	bk, _ := book.Even(ds.NumNodes(), 2)
	if _, err := New(Options{Dataset: ds, Partition: &Partition{Book: bk, Part: 2}}); err == nil || !strings.Contains(err.Error(), "part 2") {
		t.Fatalf("part 2 of 2: %v", err)
	}
	other, _ := book.Even(ds.NumNodes()+1, 2)
	if _, err := New(Options{Dataset: ds, Partition: &Partition{Book: other, Part: 0}}); err == nil || !strings.Contains(err.Error(), "covers") {
		t.Fatalf("a partition of another graph: %v", err)
	}
	_, plain := start(t, Options{})
	_, parted := start(t, Options{Partition: &Partition{Book: bk, Part: 1}})
	for _, c := range []struct {
		addr string
		req  *servepb.SampleRequest
		code codes.Code
		want string
	}{
		{plain, &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 10, Fanouts: []int32{2}, Owned: true}, codes.FailedPrecondition, "owns no part"},
		{parted, &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 10, Fanouts: []int32{2}, Owned: true, NumParts: 2}, codes.InvalidArgument, "leave part"},
	} {
		bs, err := dial(t, c.addr, ClientOptions{}).Sample(context.Background(), c.req)
		if err == nil {
			_, err = bs.Recv()
		}
		if code(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %v naming %q", c.req, err, c.code, c.want)
		}
	}
	// Explicit seeds are cut to the part too, input_id their positions.
	c := dial(t, parted, ClientOptions{})
	got := collect(t, c, &servepb.SampleRequest{Seeds: Int64Tensor([]int64{3, 1500, 7, 1999, 1000}), BatchSize: 10, Fanouts: []int32{2}, Owned: true})
	if len(got) != 1 || !slices.Equal(int64s(t, got[0].InputId), []int64{1, 3, 4}) || !slices.Equal(int32s(t, got[0].NId)[:3], []int32{1500, 1999, 1000}) {
		t.Fatalf("owned explicit seeds: %v", got)
	}
}
