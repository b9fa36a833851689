package main

import (
	"strings"
	"testing"
)

// TestAutoDeviceSaysWhy: without a usable GPU, --device auto trains on
// the CPU and says why in one line naming the missing library.
func TestAutoDeviceSaysWhy(t *testing.T) {
	if b, err := openDevice("cuda"); err == nil {
		t.Skipf("a CUDA device is usable here (%s)", b.Name())
	}
	var note strings.Builder
	b, err := openDeviceNote("auto", &note)
	if err != nil || b.Name() != "cpu" {
		t.Fatalf("auto device: %v, %v", b, err)
	}
	line := note.String()
	if strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "device auto: cuda") || !strings.HasSuffix(line, "; using cpu\n") {
		t.Fatalf("note %q: want one line 'device auto: cuda...; using cpu'", line)
	}
	code, out, errOut := strata(t, "train", "--device", "auto", "--epochs", "1", "--model", "gcn")
	if code != 0 || !strings.Contains(errOut, "; using cpu") || !strings.Contains(out, "on cpu") {
		t.Fatalf("exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	// Quiet runs print nothing.
	if _, _, errOut := strata(t, "train", "--device", "auto", "--epochs", "1", "--model", "gcn", "--quiet"); errOut != "" {
		t.Fatalf("--quiet printed %q", errOut)
	}
	// An explicit cpu says nothing about other devices.
	var none strings.Builder
	if _, err := openDeviceNote("cpu", &none); err != nil || none.Len() != 0 {
		t.Fatalf("cpu: %v, note %q", err, none.String())
	}
}
