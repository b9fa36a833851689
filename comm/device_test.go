package comm

import "testing"

func TestSelectDevice(t *testing.T) {
	cases := []struct {
		kind string
		t    Topology
		want string
	}{
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: true, NCCL: true}, KindNCCL},
		{"", Topology{GPUs: true, PeerAccess: true, NCCL: true}, KindNCCL},
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: false, NCCL: true}, KindGPUShm},
		{"auto", Topology{SameHost: true, GPUs: true, PeerAccess: true, NCCL: false}, KindGPUShm},
		{"auto", Topology{SameHost: true}, KindGPUShm},
		{"auto", Topology{GPUs: true, NCCL: true}, KindTCP},
		{"shm", Topology{SameHost: true, GPUs: true}, KindGPUShm},
		{"GPUSHM", Topology{SameHost: true, GPUs: true, PeerAccess: true, NCCL: true}, KindGPUShm},
		{"tcp", Topology{SameHost: true, GPUs: true}, KindTCP},
		{"nccl", Topology{GPUs: true, NCCL: true}, KindNCCL},
	}
	for _, c := range cases {
		got, why, err := SelectDevice(c.kind, c.t)
		if err != nil || got != c.want || why == "" {
			t.Errorf("SelectDevice(%q, %+v) = %q, %q, %v; want %q", c.kind, c.t, got, why, err, c.want)
		}
	}
	for _, b := range []struct {
		kind string
		t    Topology
	}{
		{"nccl", Topology{SameHost: true}},
		{"nccl", Topology{GPUs: true}},
		{"gpushm", Topology{GPUs: true}},
		{"inproc", Topology{SameHost: true}},
		{"mpi", Topology{}},
	} {
		if _, _, err := SelectDevice(b.kind, b.t); err == nil {
			t.Errorf("SelectDevice(%q, %+v) succeeded", b.kind, b.t)
		}
	}
}
