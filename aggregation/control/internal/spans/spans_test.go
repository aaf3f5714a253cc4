package spans

import (
	"strings"
	"testing"
)

func TestAllocFirstFit(t *testing.T) {
	a := New(0, 10)
	s1, _ := a.Alloc(4)
	s2, _ := a.Alloc(4)
	if s1 != (Span{0, 4}) || s2 != (Span{4, 4}) {
		t.Fatalf("first two spans %v %v, want [0, 4) [4, 8)", s1, s2)
	}
	if _, ok := a.Alloc(3); ok {
		t.Fatal("allocated past the end")
	}
	a.Free(s1)
	if total, largest := a.Available(); total != 6 || largest != 4 {
		t.Errorf("Available = %d, %d; want 6, 4", total, largest)
	}
	s3, _ := a.Alloc(2)
	if s3.Base != 0 {
		t.Errorf("first fit got %v, want base 0", s3)
	}
	s4, ok := a.Alloc(2)
	if !ok || s4.Base != 2 {
		t.Errorf("second fit got %v, want base 2", s4)
	}
	a.Free(s2)
	if a.InUse() != 4 {
		t.Errorf("InUse = %d, want 4", a.InUse())
	}
	if _, ok := a.Alloc(0); ok {
		t.Error("allocated an empty span")
	}
}

func TestAllocNonZeroLow(t *testing.T) {
	a := New(100, 108)
	s, ok := a.Alloc(8)
	if !ok || s != (Span{100, 8}) {
		t.Fatalf("got %v %v, want [100, 108)", s, ok)
	}
	if _, ok := a.Alloc(1); ok {
		t.Fatal("allocated past the end")
	}
}

func TestAllocAt(t *testing.T) {
	for _, tt := range []struct {
		name    string
		base, n uint32
		ok      bool
	}{
		{"free, at the start", 0, 2, true},
		{"free, between", 4, 2, true},
		{"free, up to the end", 8, 2, true},
		{"overlaps the head of a span", 1, 2, false},
		{"overlaps the tail of a span", 5, 2, false},
		{"covers a span", 1, 8, false},
		{"past the end", 9, 2, false},
		{"below the range", 0, 1, false},
		{"empty", 3, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lo := uint32(0)
			if tt.name == "below the range" {
				lo = 1
			}
			a := New(lo, 10)
			if _, ok := a.AllocAt(2, 2); !ok { // [2, 4)
				t.Fatal("setup: AllocAt(2, 2) failed")
			}
			if _, ok := a.AllocAt(6, 2); !ok { // [6, 8)
				t.Fatal("setup: AllocAt(6, 2) failed")
			}
			s, ok := a.AllocAt(tt.base, tt.n)
			if ok != tt.ok {
				t.Fatalf("AllocAt(%d, %d) = %v, %v; want ok %v", tt.base, tt.n, s, ok, tt.ok)
			}
			if ok && (s != Span{tt.base, tt.n} || a.InUse() != 4+tt.n) {
				t.Fatalf("AllocAt(%d, %d) = %v, in use %d", tt.base, tt.n, s, a.InUse())
			}
		})
	}
}

func TestFreeUnallocatedPanics(t *testing.T) {
	a := New(0, 10)
	s, _ := a.Alloc(4)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "[0, 3)") {
			t.Fatalf("recovered %v, want a panic naming [0, 3)", r)
		}
	}()
	a.Free(Span{s.Base, 3})
}

func TestOverlaps(t *testing.T) {
	for _, tt := range []struct {
		a, b Span
		want bool
	}{
		{Span{0, 4}, Span{4, 4}, false},
		{Span{0, 5}, Span{4, 4}, true},
		{Span{2, 1}, Span{0, 8}, true},
		{Span{3, 0}, Span{0, 8}, false},
	} {
		if got := tt.a.Overlaps(tt.b); got != tt.want || tt.b.Overlaps(tt.a) != tt.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v (both ways)", tt.a, tt.b, got, tt.want)
		}
	}
}
