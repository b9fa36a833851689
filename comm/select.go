package comm

import (
	"fmt"
	"strings"
)

// Back-end kinds for --comm.
const (
	KindAuto   = "auto"
	KindInproc = "inproc"
	KindShm    = "shm"
	KindTCP    = "tcp"
	KindNCCL   = "nccl"
)

// Kinds lists the values --comm accepts.
var Kinds = []string{KindAuto, KindInproc, KindShm, KindTCP, KindNCCL}

// Topology describes where the ranks run, for Select.
type Topology struct {
	// Virtual: the ranks are goroutines of one process (CPU virtual
	// devices).
	Virtual bool
	// SameHost: every rank runs on this host.
	SameHost bool
	// GPUs: each rank drives a GPU.
	GPUs bool
	// PeerAccess: every pair of the ranks' GPUs has peer-to-peer access.
	PeerAccess bool
	// NCCL: the NCCL library can be loaded.
	NCCL bool
}

// Select resolves --comm kind for a topology. auto picks NCCL when every
// GPU pair has peer-to-peer access (and NCCL loads), shared memory for
// ranks on one host otherwise (GPUs without P2P, or CPU processes), TCP
// across hosts, and in-process for virtual devices. An explicit kind is
// checked against the topology. The second result says why.
func Select(kind string, t Topology) (string, string, error) {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", KindAuto:
		switch {
		case t.Virtual:
			return KindInproc, "ranks are goroutines of one process", nil
		case t.GPUs && t.PeerAccess && t.NCCL:
			return KindNCCL, "every GPU pair has peer-to-peer access", nil
		case t.SameHost:
			why := "all ranks are on one host"
			if t.GPUs && !t.PeerAccess {
				why += " and not every GPU pair has peer-to-peer access"
			} else if t.GPUs {
				why += " and NCCL is not available"
			}
			return KindShm, why, nil
		default:
			return KindTCP, "the ranks are on several hosts", nil
		}
	case KindInproc:
		if !t.Virtual {
			return "", "", fmt.Errorf("comm: --comm inproc needs ranks that are goroutines of one process; separate processes use shm or tcp")
		}
		return KindInproc, "requested", nil
	case KindShm:
		if !t.SameHost {
			return "", "", fmt.Errorf("comm: --comm shm needs every rank on one host")
		}
		return KindShm, "requested", nil
	case KindTCP:
		return KindTCP, "requested", nil
	case KindNCCL:
		if !t.GPUs {
			return "", "", fmt.Errorf("comm: --comm nccl needs a GPU per rank")
		}
		if !t.NCCL {
			return "", "", fmt.Errorf("comm: --comm nccl: NCCL is not available in this build or on this host")
		}
		return KindNCCL, "requested", nil
	}
	return "", "", fmt.Errorf("comm: unknown --comm %q (want one of %s)", kind, strings.Join(Kinds, ", "))
}
