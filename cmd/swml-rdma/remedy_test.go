package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestRemedies: every error the library leaves the fix of to its caller
// gets one, and docs/operations.md's error table names the same fix.
func TestRemedies(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range remedies {
		err := fmt.Errorf("op: %w", r.err)
		got := remedy(err)
		if got != "; "+r.fix {
			t.Errorf("remedy(%v) = %q, want %q", err, got, r.fix)
		}
		// The table's fix column holds each remedy's first flag or command.
		first := strings.Fields(r.fix)
		key := ""
		for _, w := range first {
			if strings.HasPrefix(w, "--") || strings.HasPrefix(w, "`") {
				key = strings.Trim(w, ",;")
				break
			}
		}
		if key != "" && !strings.Contains(string(doc), key) {
			t.Errorf("docs/operations.md does not mention %s (the fix for %v)", key, r.err)
		}
	}
	if remedy(fmt.Errorf("other")) != "" {
		t.Error("an unrelated error got a remedy")
	}
}
