package flowctl

import (
	"math/rand/v2"
	"testing"
)

func TestCredits(t *testing.T) {
	type step struct {
		op   string // "grant", "acquire", "release", "reset"
		n    uint32 // grant value
		ok   bool   // acquire result
		want int    // granted after the step
		out  int    // outstanding after the step
	}
	tests := []struct {
		name  string
		slots int
		steps []step
	}{
		{"starts at one", 8, []step{
			{op: "acquire", ok: true, want: 1, out: 1},
			{op: "acquire", ok: false, want: 1, out: 1},
			{op: "release", want: 1, out: 0},
			{op: "acquire", ok: true, want: 1, out: 1},
		}},
		{"grant clamps to slots", 4, []step{
			{op: "grant", n: 64, want: 4},
			{op: "acquire", ok: true, want: 4, out: 1},
			{op: "acquire", ok: true, want: 4, out: 2},
			{op: "acquire", ok: true, want: 4, out: 3},
			{op: "acquire", ok: true, want: 4, out: 4},
			{op: "acquire", ok: false, want: 4, out: 4},
		}},
		{"grant of zero means one", 4, []step{
			{op: "grant", n: 0, want: 1},
			{op: "acquire", ok: true, want: 1, out: 1},
			{op: "acquire", ok: false, want: 1, out: 1},
		}},
		{"shrinking grant blocks until below it", 8, []step{
			{op: "grant", n: 4, want: 4},
			{op: "acquire", ok: true, want: 4, out: 1},
			{op: "acquire", ok: true, want: 4, out: 2},
			{op: "acquire", ok: true, want: 4, out: 3},
			{op: "grant", n: 2, want: 2, out: 3},
			{op: "acquire", ok: false, want: 2, out: 3},
			{op: "release", want: 2, out: 2},
			{op: "acquire", ok: false, want: 2, out: 2},
			{op: "release", want: 2, out: 1},
			{op: "acquire", ok: true, want: 2, out: 2},
		}},
		{"reset restarts at one", 8, []step{
			{op: "grant", n: 8, want: 8},
			{op: "acquire", ok: true, want: 8, out: 1},
			{op: "acquire", ok: true, want: 8, out: 2},
			{op: "reset", want: 1, out: 0},
			{op: "acquire", ok: true, want: 1, out: 1},
			{op: "acquire", ok: false, want: 1, out: 1},
		}},
		{"huge grant", 128, []step{{op: "grant", n: 0xffffffff, want: 128}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCredits(tc.slots)
			if c.Granted() != 1 || c.Outstanding() != 0 || c.Slots() != tc.slots {
				t.Fatalf("new: granted %d outstanding %d slots %d", c.Granted(), c.Outstanding(), c.Slots())
			}
			for i, s := range tc.steps {
				switch s.op {
				case "grant":
					if got := c.Grant(s.n); int(got) != s.want {
						t.Fatalf("step %d: Grant(%d) = %d, want %d", i, s.n, got, s.want)
					}
				case "acquire":
					if got := c.TryAcquire(); got != s.ok {
						t.Fatalf("step %d: TryAcquire = %v, want %v", i, got, s.ok)
					}
				case "release":
					c.Release()
				case "reset":
					c.Reset()
				}
				if c.Granted() != s.want || c.Outstanding() != s.out {
					t.Fatalf("step %d (%s): granted %d outstanding %d, want %d %d",
						i, s.op, c.Granted(), c.Outstanding(), s.want, s.out)
				}
				if want := max(0, s.want-s.out); c.Available() != want {
					t.Fatalf("step %d: Available %d, want %d", i, c.Available(), want)
				}
			}
		})
	}
}

func TestCreditsPanics(t *testing.T) {
	expectPanic(t, "NewCredits(0)", func() { NewCredits(0) })
	expectPanic(t, "Release at zero", func() { NewCredits(1).Release() })
}

// TestCreditsRandom drives Credits with random grants, acquisitions and
// releases and checks that a call is admitted exactly when fewer calls than
// the grant in force are outstanding.
func TestCreditsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		slots := 1 + rng.IntN(64)
		c := NewCredits(slots)
		granted, outstanding := 1, 0
		for range 2000 {
			switch rng.IntN(10) {
			case 0:
				n := rng.Uint32N(100)
				c.Grant(n)
				granted = min(max(int(n), 1), slots)
			case 1, 2, 3, 4:
				ok := c.TryAcquire()
				if ok != (outstanding < granted) {
					t.Fatalf("TryAcquire = %v with %d outstanding of %d granted", ok, outstanding, granted)
				}
				if ok {
					outstanding++
				}
			case 5:
				if rng.IntN(20) == 0 {
					c.Reset()
					granted, outstanding = 1, 0
				}
			default:
				if outstanding > 0 {
					c.Release()
					outstanding--
				}
			}
			if c.Granted() != granted || c.Outstanding() != outstanding {
				t.Fatalf("state %d/%d, model %d/%d", c.Outstanding(), c.Granted(), outstanding, granted)
			}
			if c.Granted() < 1 || c.Granted() > slots {
				t.Fatalf("grant %d outside [1, %d]", c.Granted(), slots)
			}
		}
	}
}

func expectPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}
