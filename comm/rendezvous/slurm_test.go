package rendezvous

import (
	"strings"
	"testing"
)

func lookupOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromSLURM(t *testing.T) {
	e, err := FromSLURMLookup(lookupOf("SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURM_LOCALID", "1",
		"SLURM_NTASKS_PER_NODE", "2", "SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3", "SLURM_JOB_ID", "123456"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Rank != 3 || e.WorldSize != 4 || e.LocalRank != 1 || e.LocalWorldSize != 2 || e.Addr() != "10.1.2.3:23456" {
		t.Fatalf("%+v", e)
	}
	// MASTER_ADDR and MASTER_PORT win; an uneven SLURM_NTASKS_PER_NODE
	// says nothing about this node.
	e, err = FromSLURMLookup(lookupOf("SLURM_PROCID", "0", "SLURM_NPROCS", "3", "SLURM_NTASKS_PER_NODE", "2(x1),1",
		"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3", "MASTER_ADDR", "node7", "MASTER_PORT", "29500"))
	if err != nil {
		t.Fatal(err)
	}
	if e.WorldSize != 3 || e.LocalWorldSize != -1 || e.LocalRank != -1 || e.Addr() != "node7:29500" {
		t.Fatalf("%+v", e)
	}
	for _, b := range []struct {
		name string
		env  func(string) (string, bool)
	}{
		{"SLURM_NTASKS", lookupOf("SLURM_PROCID", "0", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"SLURM_PROCID", lookupOf("SLURM_PROCID", "4", "SLURM_NTASKS", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"SLURM_PROCID", lookupOf("SLURM_NTASKS", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"SLURM_LOCALID", lookupOf("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_NTASKS_PER_NODE", "2", "SLURM_LOCALID", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"SLURM_JOB_ID", lookupOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "MASTER_ADDR", "h")},
		{"SLURM_JOB_ID", lookupOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "MASTER_ADDR", "h", "SLURM_JOB_ID", "-1")},
		{"MASTER_PORT", lookupOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "MASTER_ADDR", "h", "MASTER_PORT", "0")},
		{"MASTER_ADDR", lookupOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_ID", "5")},
	} {
		if _, err := FromSLURMLookup(b.env); err == nil || !strings.Contains(err.Error(), b.name) {
			t.Errorf("%s: error %v should name it", b.name, err)
		}
	}
}

func TestDetect(t *testing.T) {
	srun := []string{"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "7", "SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9"}
	for _, tc := range []struct {
		name string
		env  []string
		src  Source
		rank int
		bad  string
	}{
		{"alone", nil, SourceNone, 0, ""},
		{"torchrun", []string{"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "9"}, SourceTorchrun, 1, ""},
		{"torchrun wins over slurm", append([]string{"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "9"}, srun...), SourceTorchrun, 0, ""},
		{"torchrun incomplete", []string{"WORLD_SIZE", "2"}, SourceTorchrun, 0, "RANK"},
		{"torchrun agent's port", []string{"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "65535", "TORCHELASTIC_USE_AGENT_STORE", "True"}, SourceTorchrun, 0, "65535"},
		{"srun task", srun, SourceSLURM, 1, ""},
		{"sbatch script", []string{"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_ID", "7"}, SourceNone, 0, ""},
		{"one task", []string{"SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "7", "SLURM_LAUNCH_NODE_IPADDR", "h"}, SourceNone, 0, ""},
		{"srun without address", []string{"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "7"}, SourceSLURM, 0, "MASTER_ADDR"},
	} {
		e, src, err := Detect(lookupOf(tc.env...))
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.bad)
			}
			continue
		}
		if err != nil || src != tc.src || e.Rank != tc.rank {
			t.Errorf("%s: %+v %q %v, want source %q rank %d", tc.name, e, src, err, tc.src, tc.rank)
		}
	}
}

func TestDetectUnderTorchrunsAgent(t *testing.T) {
	e, src, err := Detect(lookupOf("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29500", "TORCHELASTIC_USE_AGENT_STORE", "True"))
	if err != nil || src != SourceTorchrun || e.MasterPort != 29501 {
		t.Fatalf("%+v %q %v: want the port after the agent's", e, src, err)
	}
	e, _, err = Detect(lookupOf("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29500", "TORCHELASTIC_USE_AGENT_STORE", "False"))
	if err != nil || e.MasterPort != 29500 {
		t.Fatalf("%+v %v: want MASTER_PORT itself", e, err)
	}
}
