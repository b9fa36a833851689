package cuda

import (
	"strings"
	"testing"
)

// TestFromEnv: STRATA_CUDA_TF32 turns Options.TF32 on only through
// FromEnv (Open does not read it), and a non-boolean is an error naming
// the variable.
func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env           string
		in, want, set bool
		fail          bool
	}{
		{"", false, false, false, false}, {"", true, true, false, false},
		{"1", false, true, true, false}, {"true", false, true, true, false},
		{"0", false, false, true, false}, {"0", true, true, true, false},
		{"yes please", false, false, false, true},
	} {
		t.Setenv(EnvTF32, c.env)
		o, set, err := FromEnv(Options{TF32: c.in, HighPriority: true})
		if (err != nil) != c.fail || (err != nil && !strings.Contains(err.Error(), EnvTF32)) {
			t.Errorf("%s=%q: error %v", EnvTF32, c.env, err)
			continue
		}
		if err == nil && (o.TF32 != c.want || set != c.set || !o.HighPriority) {
			t.Errorf("%s=%q over TF32 %v: %+v (set %v), want TF32 %v (set %v)", EnvTF32, c.env, c.in, o, set, c.want, c.set)
		}
	}
}
