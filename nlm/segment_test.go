package nlm

import (
	"slices"
	"testing"
)

func TestApplySegment(t *testing.T) {
	var s []segment
	s = applySegment(s, 0, 99, true, false)
	s = applySegment(s, 10, 19, false, false)
	want := []segment{{0, 9, true}, {10, 19, false}, {20, 99, true}}
	if !slices.Equal(s, want) {
		t.Fatalf("%v, want %v", s, want)
	}
	s = applySegment(s, 5, 25, false, true)
	want = []segment{{0, 4, true}, {26, 99, true}}
	if !slices.Equal(s, want) {
		t.Fatalf("after unlock %v, want %v", s, want)
	}
	s = applySegment(s, 0, ToEOF, false, true)
	if len(s) != 0 {
		t.Fatalf("after unlocking all: %v", s)
	}
	s = applySegment(s, 100, ToEOF, true, false)
	s = applySegment(s, 200, 300, true, true)
	want = []segment{{100, 199, true}, {301, ToEOF, true}}
	if !slices.Equal(s, want) {
		t.Fatalf("%v, want %v", s, want)
	}
}
