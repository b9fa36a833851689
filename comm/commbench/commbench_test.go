package commbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if IsChild() {
		if err := ChildMain(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	cfg := Config{Backends: []string{"inproc", "shm", "shm:plain", "tcp"}, MinBytes: 4 << 10, MaxBytes: 256 << 10, Budget: 1 << 20,
		MinIters: 1, MaxIters: 20, Repeats: 1, Self: []string{os.Args[0], "-test.run=^$"}}
	if testing.Short() {
		cfg.Backends = []string{"inproc", "shm", "tcp"}
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Series) != len(cfg.Backends) {
		t.Fatalf("%d series", len(rep.Series))
	}
	for _, s := range rep.Series {
		if s.Error != "" {
			t.Fatalf("%s: %s", s.Backend, s.Error)
		}
		if len(s.Points) != 4 {
			t.Fatalf("%s: %d points", s.Backend, len(s.Points))
		}
		for i, p := range s.Points {
			if p.Bytes != int64(4<<10)<<(2*i) || p.Iters < 1 || p.Seconds <= 0 || p.AlgBW <= 0 || p.BusBW != p.AlgBW*rep.BusFactor {
				t.Errorf("%s point %d: %+v", s.Backend, i, p)
			}
		}
	}
	if rep.BusFactor != 1 { // all-reduce on 2 ranks: 2(n-1)/n
		t.Errorf("bus factor %v", rep.BusFactor)
	}
	var tab bytes.Buffer
	rep.WriteTable(&tab)
	if !strings.Contains(tab.String(), "shm/tcp") || !strings.Contains(tab.String(), "256 KiB") || strings.Count(tab.String(), "\n") != 6 {
		t.Errorf("table:\n%s", tab.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Series) != len(rep.Series) || back.Series[0].Points[0] != rep.Series[0].Points[0] {
		t.Fatalf("JSON round trip: %v\n%s", err, js.String())
	}
}

func TestOps(t *testing.T) {
	for _, op := range []string{"broadcast", "all_gather", "all_to_all", "reduce_scatter"} {
		cfg := Config{Backends: []string{"inproc"}, Procs: 3, Op: op, MinBytes: 1 << 10, MaxBytes: 64 << 10, Budget: 1 << 18, MinIters: 1, Repeats: 1}
		rep, err := Run(context.Background(), cfg)
		if err != nil || rep.Series[0].Error != "" || len(rep.Series[0].Points) != 4 {
			t.Fatalf("%s: %v %+v", op, err, rep)
		}
	}
	if _, err := Run(context.Background(), Config{Op: "gather"}); err == nil {
		t.Error("unknown op accepted")
	}
	if _, err := Run(context.Background(), Config{Backends: []string{"mpi"}}); err == nil {
		t.Error("unknown back end mpi accepted")
	}
	if _, err := Run(context.Background(), Config{MinBytes: 1 << 20, MaxBytes: 1 << 10}); err == nil {
		t.Error("min > max accepted")
	}
}
