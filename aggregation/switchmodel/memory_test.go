package switchmodel

import (
	"runtime"
	"testing"
)

// TestSlotBytes: a pipeline's heap grows by what SlotBytes says per slot
// (within the maps and tables that do not grow with the pool).
func TestSlotBytes(t *testing.T) {
	const pool = 1 << 12
	cfg := Config{PoolSize: pool}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(p)
	got, want := after.TotalAlloc-before.TotalAlloc, pool*cfg.SlotBytes()
	if got < want || got > want+want/8 {
		t.Fatalf("New with %d slots allocated %d bytes; SlotBytes says %d (%d per slot)", pool, got, want, cfg.SlotBytes())
	}
}
