package nccl

import (
	"strings"
	"testing"
)

// TestFromEnv: STRATA_NCCL_ASYNC reaches Options.Async only through
// FromEnv, overriding it either way; a non-boolean is an error naming it.
func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env       string
		in, want  bool
		set, fail bool
	}{
		{"", false, false, false, false}, {"", true, true, false, false},
		{"1", false, true, true, false}, {"true", false, true, true, false},
		{"0", true, false, true, false}, {" false ", true, false, true, false},
		{"maybe", false, false, false, true},
	} {
		t.Setenv(EnvAsync, c.env)
		o, set, err := FromEnv(Options{Async: c.in, Prefix: "p"})
		if (err != nil) != c.fail || (err != nil && !strings.Contains(err.Error(), EnvAsync)) {
			t.Errorf("%s=%q: error %v", EnvAsync, c.env, err)
			continue
		}
		if err == nil && (o.Async != c.want || set != c.set || o.Prefix != "p") {
			t.Errorf("%s=%q over Async %v: %+v (set %v), want Async %v (set %v)", EnvAsync, c.env, c.in, o, set, c.want, c.set)
		}
		// The library itself does not look at the variable.
		if AsyncFor(Options{Async: c.in}) != c.in {
			t.Errorf("%s=%q: AsyncFor(Async %v) changed by the environment", EnvAsync, c.env, c.in)
		}
	}
}
