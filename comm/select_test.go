package comm

import "testing"

func TestSelect(t *testing.T) {
	cases := []struct {
		kind string
		t    Topology
		want string
	}{
		{"auto", Topology{Virtual: true, SameHost: true}, KindInproc},
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: true, NCCL: true}, KindNCCL},
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: false, NCCL: true}, KindShm},
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: true, NCCL: false}, KindShm},
		{"auto", Topology{SameHost: true}, KindShm},
		{"", Topology{}, KindTCP},
		{"auto", Topology{GPUs: true, NCCL: true}, KindTCP},
		{"TCP", Topology{SameHost: true}, KindTCP},
		{"shm", Topology{SameHost: true}, KindShm},
		{"inproc", Topology{Virtual: true}, KindInproc},
		{"nccl", Topology{GPUs: true, NCCL: true}, KindNCCL},
	}
	for _, c := range cases {
		got, why, err := Select(c.kind, c.t)
		if err != nil || got != c.want || why == "" {
			t.Errorf("Select(%q, %+v) = %q, %q, %v; want %q", c.kind, c.t, got, why, err, c.want)
		}
	}
	bad := []struct {
		kind string
		t    Topology
	}{
		{"inproc", Topology{SameHost: true}},
		{"shm", Topology{}},
		{"nccl", Topology{SameHost: true}},
		{"nccl", Topology{GPUs: true}},
		{"mpi", Topology{}},
	}
	for _, b := range bad {
		if _, _, err := Select(b.kind, b.t); err == nil {
			t.Errorf("Select(%q, %+v) succeeded", b.kind, b.t)
		}
	}
}
