package flowctl

import (
	"math/rand/v2"
	"testing"
)

func TestReceives(t *testing.T) {
	type step struct {
		op     string // "credits", "consume", "post", "reset"
		n      int
		need   int // Need() after the step
		posted int
		target int
	}
	tests := []struct {
		name                string
		depth, extra, batch int
		steps               []step
	}{
		{"new connection posts credit plus extra", 128, 4, 8, []step{
			{op: "post", n: 5, need: 0, posted: 5, target: 5},
		}},
		{"grant grows: post at once", 128, 4, 8, []step{
			{op: "post", n: 5, posted: 5, target: 5},
			{op: "credits", n: 64, need: 63, posted: 5, target: 68},
			{op: "post", n: 63, posted: 68, target: 68},
		}},
		{"batching", 128, 4, 8, []step{
			{op: "credits", n: 64, need: 68, target: 68},
			{op: "post", n: 68, posted: 68, target: 68},
			{op: "consume", need: 0, posted: 67, target: 68},
			{op: "consume", need: 0, posted: 66, target: 68},
			{op: "consume", need: 0, posted: 65, target: 68},
			{op: "consume", need: 0, posted: 64, target: 68}, // still one per credit
			{op: "consume", need: 5, posted: 63, target: 68}, // below the grant: urgent
			{op: "post", n: 5, posted: 68, target: 68},
		}},
		{"batch reached before the grant", 128, 16, 8, []step{
			{op: "credits", n: 32, need: 48, target: 48},
			{op: "post", n: 48, posted: 48, target: 48},
			{op: "consume", posted: 47, target: 48},
			{op: "consume", posted: 46, target: 48},
			{op: "consume", posted: 45, target: 48},
			{op: "consume", posted: 44, target: 48},
			{op: "consume", posted: 43, target: 48},
			{op: "consume", posted: 42, target: 48},
			{op: "consume", posted: 41, target: 48},
			{op: "consume", need: 8, posted: 40, target: 48}, // a full batch
		}},
		{"grant shrinks: no reposting until below target", 128, 2, 4, []step{
			{op: "credits", n: 32, need: 34, target: 34},
			{op: "post", n: 34, posted: 34, target: 34},
			{op: "credits", n: 8, posted: 34, target: 10},
			{op: "consume", posted: 33, target: 10},
		}},
		{"depth caps the target", 16, 4, 4, []step{
			{op: "credits", n: 64, need: 16, target: 16},
			{op: "post", n: 16, posted: 16, target: 16},
			{op: "consume", need: 1, posted: 15, target: 16}, // below min(grant, depth)
		}},
		{"reset", 128, 4, 8, []step{
			{op: "credits", n: 64, need: 68, target: 68},
			{op: "post", n: 68, posted: 68, target: 68},
			{op: "reset", need: 5, posted: 0, target: 5},
		}},
		{"grant of zero means one", 128, 0, 8, []step{
			{op: "credits", n: 0, need: 1, target: 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReceives(tc.depth, tc.extra, tc.batch)
			if r.Posted() != 0 || r.Need() != min(1+tc.extra, tc.depth) {
				t.Fatalf("new: posted %d need %d", r.Posted(), r.Need())
			}
			for i, s := range tc.steps {
				switch s.op {
				case "credits":
					r.SetCredits(s.n)
				case "consume":
					r.Consume()
				case "post":
					r.Post(s.n)
				case "reset":
					r.Reset()
				}
				if r.Need() != s.need || r.Posted() != s.posted || r.Target() != s.target {
					t.Fatalf("step %d (%s %d): need %d posted %d target %d, want %d %d %d",
						i, s.op, s.n, r.Need(), r.Posted(), r.Target(), s.need, s.posted, s.target)
				}
			}
		})
	}
}

func TestReceivesPanics(t *testing.T) {
	expectPanic(t, "depth 0", func() { NewReceives(0, 0, 1) })
	expectPanic(t, "batch 0", func() { NewReceives(8, 0, 0) })
	expectPanic(t, "extra -1", func() { NewReceives(8, -1, 1) })
	r := NewReceives(4, 0, 1)
	expectPanic(t, "Consume with nothing posted", func() { r.Consume() })
	expectPanic(t, "Post beyond depth", func() { r.Post(5) })
	expectPanic(t, "Post negative", func() { r.Post(-1) })
}

// TestReceivesRandom runs a transport loop: calls are sent only with a
// credit, each reply consumes a receive, and after each completion the
// transport posts what Need asks. It checks that a receive is always posted
// for every outstanding call before it is sent, and that the queue never
// overfills.
func TestReceivesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 30 {
		depth := 4 + rng.IntN(200)
		slots := 1 + rng.IntN(depth)
		extra := rng.IntN(8)
		batch := 1 + rng.IntN(16)
		c := NewCredits(slots)
		r := NewReceives(depth, extra, batch)
		r.Post(r.Need())
		inflight := 0
		for range 5000 {
			if rng.IntN(2) == 0 && c.TryAcquire() {
				inflight++
				if r.Posted() < inflight {
					t.Fatalf("call sent with %d outstanding and only %d receives posted", inflight, r.Posted())
				}
			} else if inflight > 0 {
				// A reply arrives with a new grant.
				r.Consume()
				r.SetCredits(int(c.Grant(rng.Uint32N(uint32(2 * slots)))))
				c.Release()
				inflight--
				r.Post(r.Need())
			}
			if r.Posted() > depth {
				t.Fatalf("%d posted on a queue of %d", r.Posted(), depth)
			}
			if r.Posted() < min(c.Granted(), depth) {
				t.Fatalf("%d posted with %d credits after reposting", r.Posted(), c.Granted())
			}
		}
	}
}
