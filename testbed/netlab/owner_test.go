//go:build linux

package netlab

import (
	"os"
	"strings"
	"testing"
)

func TestOwner(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{
		{"swlab1234-sw", 1234},
		{"swlab1234-w12", 1234},
		{"swlab-sw", 0},
		{"swlabx-w0", 0},
		{"swlab1234", 0},
		{"other1234-sw", 0},
	} {
		if got := owner("swlab", tc.name); got != tc.want {
			t.Errorf("owner(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
	if err := checkEUID(1000); err == nil || !strings.Contains(err.Error(), "run it as root") {
		t.Errorf("not root: %v, want a refusal saying to run it as root", err)
	}
	if err := checkEUID(0); err != nil {
		t.Errorf("root: %v", err)
	}
	if !alive(os.Getpid()) {
		t.Error("alive(this process) = false")
	}
}
