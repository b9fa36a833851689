package rendezvous

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SLURMPortBase is where FromSLURM's default MASTER_PORT range starts:
// SLURMPortBase + SLURM_JOB_ID mod 10000, so that two jobs sharing a node
// rarely pick the same port and every task of a job picks the same one.
const SLURMPortBase = 20000

// FromSLURM reads the variables srun sets for each task of a job step:
// SLURM_PROCID (the rank), SLURM_NTASKS (the world size; SLURM_NPROCS
// in old releases), SLURM_LOCALID (LOCAL_RANK) and, when it is one
// number, SLURM_NTASKS_PER_NODE (LOCAL_WORLD_SIZE). The store's address
// is MASTER_ADDR when set, else SLURM_LAUNCH_NODE_IPADDR: the node srun
// ran on, which hosts task 0 when srun runs inside an sbatch script (the
// script runs on the allocation's first node, where block distribution
// puts task 0); launched from elsewhere, set MASTER_ADDR to task 0's
// node. The port is MASTER_PORT when set, else SLURMPortBase +
// SLURM_JOB_ID mod 10000.
func FromSLURM() (Env, error) { return FromSLURMLookup(os.LookupEnv) }

// FromSLURMLookup is FromSLURM reading variables through lookup.
func FromSLURMLookup(lookup func(string) (string, bool)) (Env, error) {
	get := func(names ...string) (string, string) {
		for _, n := range names {
			if v, ok := lookup(n); ok && v != "" {
				return n, v
			}
		}
		return names[0], ""
	}
	num := func(lo, hi int, names ...string) (int, error) {
		name, s := get(names...)
		if s == "" {
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
	if e.WorldSize, err = num(1, MaxWorldSize, "SLURM_NTASKS", "SLURM_NPROCS"); err != nil {
		return Env{}, err
	}
	if e.WorldSize < 0 {
		return Env{}, fmt.Errorf("rendezvous: SLURM_NTASKS is not set (run the tasks with srun)")
	}
	if e.Rank, err = num(0, e.WorldSize-1, "SLURM_PROCID"); err != nil {
		return Env{}, err
	}
	if e.Rank < 0 {
		return Env{}, fmt.Errorf("rendezvous: SLURM_PROCID is not set (run the tasks with srun)")
	}
	// "2(x3)" and "2,1" (uneven nodes) say nothing about this node: unset.
	if _, s := get("SLURM_NTASKS_PER_NODE"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v >= 1 && v <= e.WorldSize {
			e.LocalWorldSize = v
		} else {
			e.LocalWorldSize = -1
		}
	} else {
		e.LocalWorldSize = -1
	}
	hi := e.WorldSize - 1
	if e.LocalWorldSize > 0 {
		hi = e.LocalWorldSize - 1
	}
	if e.LocalRank, err = num(0, hi, "SLURM_LOCALID"); err != nil {
		return Env{}, err
	}
	if e.MasterPort, err = num(1, 65535, "MASTER_PORT"); err != nil {
		return Env{}, err
	}
	if e.MasterPort < 0 {
		job, err := num(0, 1<<62, "SLURM_JOB_ID", "SLURM_JOBID")
		if err != nil {
			return Env{}, err
		}
		if job < 0 {
			return Env{}, fmt.Errorf("rendezvous: neither MASTER_PORT nor SLURM_JOB_ID is set")
		}
		e.MasterPort = SLURMPortBase + job%10000
	}
	_, addr := get("MASTER_ADDR", "SLURM_LAUNCH_NODE_IPADDR")
	if addr == "" {
		return Env{}, fmt.Errorf("rendezvous: neither MASTER_ADDR nor SLURM_LAUNCH_NODE_IPADDR is set (set MASTER_ADDR to task 0's node)")
	}
	e.MasterAddr = addr
	return e, nil
}

// Source says where Detect found a job's description.
type Source string

const (
	// SourceNone: no job; this process is the whole run.
	SourceNone Source = ""
	// SourceTorchrun: RANK and WORLD_SIZE ('strata launch', torchrun, a
	// Kubernetes Indexed Job that sets them).
	SourceTorchrun Source = "torchrun"
	// SourceSLURM: an srun task (SLURM_PROCID, SLURM_NTASKS and
	// SLURM_STEP_ID set).
	SourceSLURM Source = "slurm"
)

// Detect finds this process's place in a job: the torchrun variables when
// RANK or WORLD_SIZE is set, else SLURM's when this is a task of an srun
// step (SLURM_STEP_ID set: an sbatch script itself is not a task) of more
// than one task, else none.
//
// Under torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True) the
// agent of node 0 already serves its own store at MASTER_PORT: the job's
// store then uses MASTER_PORT+1.
func Detect(lookup func(string) (string, bool)) (Env, Source, error) {
	set := func(n string) bool { v, ok := lookup(n); return ok && v != "" }
	if set("RANK") || set("WORLD_SIZE") {
		e, err := FromLookup(lookup)
		if v, _ := lookup("TORCHELASTIC_USE_AGENT_STORE"); err == nil && (strings.EqualFold(v, "true") || v == "1") {
			if e.MasterPort == 65535 {
				return Env{}, SourceTorchrun, fmt.Errorf("rendezvous: MASTER_PORT=65535 is torchrun's store, and the job's would be the next port: pick a lower --master-port")
			}
			e.MasterPort++
		}
		return e, SourceTorchrun, err
	}
	if set("SLURM_PROCID") && set("SLURM_STEP_ID") && (set("SLURM_NTASKS") || set("SLURM_NPROCS")) {
		e, err := FromSLURMLookup(lookup)
		if err == nil && e.WorldSize == 1 {
			return Env{}, SourceNone, nil
		}
		return e, SourceSLURM, err
	}
	return Env{}, SourceNone, nil
}
