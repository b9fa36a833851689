package gpushm

import cu "github.com/strata-gnn/strata/internal/cuda"

func cudaDeviceCount() int {
	if cu.Load() != nil {
		return 0
	}
	n, _ := cu.DeviceCount()
	return n
}
