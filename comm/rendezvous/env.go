package rendezvous

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// Env is the torchrun-style description of this process's place in a job.
type Env struct {
	Rank, WorldSize           int
	LocalRank, LocalWorldSize int // -1 when not set
	MasterAddr                string
	MasterPort                int
}

// MaxWorldSize bounds WORLD_SIZE.
const MaxWorldSize = 1 << 16

// Addr is MASTER_ADDR:MASTER_PORT.
func (e Env) Addr() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// Vars returns the environment entries ("KEY=value") describing e, for
// starting a child process.
func (e Env) Vars() []string {
	v := []string{
		"RANK=" + strconv.Itoa(e.Rank),
		"WORLD_SIZE=" + strconv.Itoa(e.WorldSize),
		"MASTER_ADDR=" + e.MasterAddr,
		"MASTER_PORT=" + strconv.Itoa(e.MasterPort),
	}
	if e.LocalRank >= 0 {
		v = append(v, "LOCAL_RANK="+strconv.Itoa(e.LocalRank))
	}
	if e.LocalWorldSize >= 0 {
		v = append(v, "LOCAL_WORLD_SIZE="+strconv.Itoa(e.LocalWorldSize))
	}
	return v
}

// FromEnv reads the variables torchrun sets. RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT are required.
func FromEnv() (Env, error) { return FromLookup(os.LookupEnv) }

// FromLookup is FromEnv reading variables through lookup.
func FromLookup(lookup func(string) (string, bool)) (Env, error) {
	num := func(name string, required bool, lo, hi int) (int, error) {
		s, ok := lookup(name)
		if !ok || s == "" {
			if required {
				return 0, fmt.Errorf("rendezvous: %s is not set (start the processes with 'strata launch' or torchrun)", name)
			}
			return -1, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < lo || v > hi {
			return 0, fmt.Errorf("rendezvous: %s=%q, want an integer in [%d, %d]", name, s, lo, hi)
		}
		return v, nil
	}
	var e Env
	var err error
	if e.WorldSize, err = num("WORLD_SIZE", true, 1, MaxWorldSize); err != nil {
		return Env{}, err
	}
	if e.Rank, err = num("RANK", true, 0, e.WorldSize-1); err != nil {
		return Env{}, err
	}
	if e.LocalWorldSize, err = num("LOCAL_WORLD_SIZE", false, 1, e.WorldSize); err != nil {
		return Env{}, err
	}
	hi := e.WorldSize - 1
	if e.LocalWorldSize > 0 {
		hi = e.LocalWorldSize - 1
	}
	if e.LocalRank, err = num("LOCAL_RANK", false, 0, hi); err != nil {
		return Env{}, err
	}
	if e.MasterPort, err = num("MASTER_PORT", true, 1, 65535); err != nil {
		return Env{}, err
	}
	addr, ok := lookup("MASTER_ADDR")
	if !ok || addr == "" {
		return Env{}, fmt.Errorf("rendezvous: MASTER_ADDR is not set (start the processes with 'strata launch' or torchrun)")
	}
	e.MasterAddr = addr
	return e, nil
}
