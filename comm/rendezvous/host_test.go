package rendezvous

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSameHostLocalGroup(t *testing.T) {
	stores := NewLocal(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make([]bool, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r], errs[r] = SameHost(ctx, stores[r], "t")
		}()
	}
	wg.Wait()
	for r := range got {
		if errs[r] != nil || !got[r] {
			t.Fatalf("rank %d: SameHost = %v, %v; want true (one process)", r, got[r], errs[r])
		}
	}
}

func TestSameHostOtherHost(t *testing.T) {
	stores := NewLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Rank 1 claims another host.
	if err := stores[1].Set(ctx, "t/host/1", []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}
	same, err := SameHost(ctx, stores[0], "t")
	if err != nil || same {
		t.Fatalf("SameHost = %v, %v; want false", same, err)
	}
}

func TestSameHostMissingRankNamesIt(t *testing.T) {
	stores := NewLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := SameHost(ctx, stores[0], "t")
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("err = %v; want one naming rank 1", err)
	}
}

func TestAdvertiseHost(t *testing.T) {
	t.Setenv("STRATA_COMM_HOST", "")
	if h := AdvertiseHost("10.1.2.3", Env{MasterAddr: "127.0.0.1"}); h != "10.1.2.3" {
		t.Fatalf("explicit host: got %q", h)
	}
	if h := AdvertiseHost("", Env{MasterAddr: "127.0.0.1", MasterPort: 29500}); h != "127.0.0.1" {
		t.Fatalf("loopback master: got %q", h)
	}
	t.Setenv("STRATA_COMM_HOST", "192.0.2.7")
	if h := AdvertiseHost("", Env{MasterAddr: "127.0.0.1"}); h != "192.0.2.7" {
		t.Fatalf("STRATA_COMM_HOST: got %q", h)
	}
}
