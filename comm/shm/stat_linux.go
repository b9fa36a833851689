//go:build linux

package shm

import (
	"os"
	"strconv"
)

func readStat(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
}
