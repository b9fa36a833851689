package cudacomm

import "testing"

// Without libcuda (CI) Load fails with the library search's error; with
// it, Load succeeds and is idempotent.
func TestLoad(t *testing.T) {
	err := Load()
	if err != nil {
		if err.Error() == "" {
			t.Fatal("empty error")
		}
		t.Skipf("no libcuda: %v", err)
	}
	if Load() != nil {
		t.Fatal("second Load failed")
	}
}
